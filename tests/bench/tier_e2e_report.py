#!/usr/bin/env python3
"""Merges a run of tests/bench/run_tier_e2e_bench.sh (the disk tier end to end) into
docs/benchmarks.json (key `disk_tier`: one entry per machine under `runs`, the targets) and
docs/benchmarks.md (the section between `<!-- disk-tier-begin -->` and `<!-- disk-tier-end -->`,
written from every run the JSON holds). Prints the run's table (for its SUMMARY.md).

  python3 tests/bench/tier_e2e_report.py RUN_DIR --label cpu-vm --commit SHA --date YYYY-MM-DD
  python3 tests/bench/tier_e2e_report.py RUN_DIR ... --print-only   # the table, nothing written

RUN_DIR holds tier_e2e.jsonl, disk.txt and machine.txt.
"""
import argparse
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGETS = {
    "spill_promote_fraction_of_ceiling": 0.90,  # rows >= 256 KiB
    "prefix_16k_over_bytes_per_ceiling": 1.10,  # promoted and loaded <= bytes/ceiling*1.1 + 5 ms
    "prefix_16k_plus_ms": 5.0,
    "trace_hit_rate_ratio": 3.0,                # with the tier / without, 4x-DRAM working set
    "dram_load_slowdown_pct": 5.0,              # while the tier writes at full speed
}


def read_jsonl(path):
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip().startswith("{")]


def human(n):
    return "%d MiB" % (n >> 20) if n >= 1 << 20 else "%d KiB" % (n >> 10)


def verdict(ok, by):
    return "met" if ok else "missed (%s)" % by


def summarize(run_dir, label, commit, date):
    rows = read_jsonl(run_dir / "tier_e2e.jsonl")
    disk = (run_dir / "disk.txt").read_text() if (run_dir / "disk.txt").exists() else ""
    machine = (run_dir / "machine.txt").read_text() if (run_dir / "machine.txt").exists() else ""
    sizes = {}
    for r in rows:
        if "row_bytes" in r and r["phase"] in ("ceiling", "spill", "promote", "latency", "dram",
                                               "counters"):
            sizes.setdefault(r["row_bytes"], {})[r["phase"]] = r
    traces = {}
    for r in rows:
        if r["phase"] == "trace":
            traces.setdefault(r["trace"], {})["with" if r["tier"] else "without"] = r
        elif r["phase"] == "trace_summary":
            traces.setdefault(r["trace"], {})["summary"] = r
    return {"label": label, "commit": commit, "date": date, "run": str(run_dir.relative_to(ROOT))
            if run_dir.resolve().is_relative_to(ROOT) else str(run_dir),
            "disk": disk.strip().splitlines()[:12], "machine": machine.strip().splitlines(),
            "sizes": {str(k): v for k, v in sorted(sizes.items(), reverse=True)},
            "traces": traces}


def table(run):
    t = TARGETS
    out = ["**%s** — commit `%s`, %s (%s). Directory tested: %s." % (
        run["label"], run["commit"], run["date"], run["run"],
        "; ".join(l for l in run["disk"][:3] if l and not l.startswith("Filesystem")))]
    out += ["", "| row | ceiling (%s) write / read GB/s | spill GB/s (drain) / ceiling | spill from "
            "first commit | promote GB/s / ceiling | prefix promoted + loaded ms (target) | 1-row "
            "promotion p50 / p99 µs | DRAM load slowdown while spilling | daemon CPU s/GB spill / "
            "promote |" % ("source per row"),
            "|---|---|---|---|---|---|---|---|---|"]
    for rb, s in run["sizes"].items():
        c, sp, pr, la, dr = (s.get(k, {}) for k in ("ceiling", "spill", "promote", "latency", "dram"))
        out.append("| %s | %s: %.2f / %.2f (builtin %.2f / %.2f) | %.2f / %.2f = %.2f | %.2f (%.2f) | "
                   "%.2f / %.2f = %.2f | %.0f (%.0f): %.2f× of it; load alone %.0f | %.0f / %.0f "
                   "(device time at ceiling %.0f) | %+.1f %% (%.2f → %.2f GB/s; tier writing %.2f "
                   "GB/s = %.2f of ceiling) | %.2f / %.2f |" % (
                       human(int(rb)), c.get("source", "?").split(" ")[0], c.get("write_gbps", 0),
                       c.get("read_gbps", 0), c.get("builtin_write_gbps", 0),
                       c.get("builtin_read_gbps", 0), sp.get("drain_gbps", 0),
                       c.get("write_gbps", 0), sp.get("drain_ratio_to_ceiling", 0),
                       sp.get("gbps_from_first_commit", 0), sp.get("ratio_from_first_commit", 0),
                       pr.get("gbps", 0), c.get("read_gbps", 0), pr.get("ratio_to_ceiling", 0),
                       pr.get("promoted_and_loaded_ms", 0), pr.get("target_ms", 0),
                       pr.get("loaded_over_target", 0), pr.get("load_only_ms", 0),
                       la.get("p50_us", 0), la.get("p99_us", 0),
                       la.get("device_one_record_at_ceiling_us", 0), dr.get("slowdown_pct", 0),
                       dr.get("idle_gbps", 0), dr.get("busy_gbps", 0),
                       dr.get("spill_gbps_during", 0), dr.get("spill_ratio_to_ceiling_during", 0),
                       sp.get("cpu_s_per_gb_drain", 0), pr.get("cpu_s_per_gb", 0)))
    out += ["", "| trace (working set = 4 × the region's rows) | token hit rate without tier | with "
            "tier | ratio (target ≥ %.0f×) | second half without / with | promotions (timed out) | "
            "lookups answered pending |" % t["trace_hit_rate_ratio"], "|---|---|---|---|---|---|---|"]
    for name, tr in run["traces"].items():
        a, b = tr.get("without", {}), tr.get("with", {})
        if not a or not b:
            continue
        ratio = b["token_hit_rate"] / a["token_hit_rate"] if a["token_hit_rate"] else 0
        out.append("| %s: %d requests, %d system prompts, %d conversations | %.3f | %.3f | %.2f× "
                   "| %.3f / %.3f | %d (%d) | %d |" % (
                       name, a["requests"], a["system_prompts"], a["conversations"],
                       a["token_hit_rate"], b["token_hit_rate"], ratio,
                       a["second_half_hit_rate"], b["second_half_hit_rate"],
                       b["promotions_ok"], b["promotions_timed_out"], b["pending_lookups"]))
    # Verdicts.
    out += ["", "| target | reached | verdict |", "|---|---|---|"]
    for rb, s in run["sizes"].items():
        if int(rb) < 256 << 10:
            continue
        sp, pr = s.get("spill", {}), s.get("promote", {})
        for what, v in (("spill (drain) ≥ 90 % of the ceiling", sp.get("drain_ratio_to_ceiling", 0)),
                        ("promote ≥ 90 % of the ceiling", pr.get("ratio_to_ceiling", 0))):
            out.append("| %s, %s rows | %.2f | %s |" % (
                what, human(int(rb)), v, verdict(v >= t["spill_promote_fraction_of_ceiling"],
                                                  "by %.0f points" % ((0.9 - v) * 100))))
        x = pr.get("loaded_over_target", 0)
        out.append("| prefix of %s × %s promoted and loaded ≤ bytes/ceiling × 1.1 + 5 ms | %.0f ms "
                   "against %.0f | %s |" % (
                       pr.get("rows", 0), human(int(rb)), pr.get("promoted_and_loaded_ms", 0),
                       pr.get("target_ms", 0), verdict(x <= 1.0, "%.2f× the bound" % x)))
        d = s.get("dram", {}).get("slowdown_pct", 0)
        out.append("| DRAM loads (%s rows) slowed ≤ 5 %% while the tier writes | %+.1f %% | %s |" % (
            human(int(rb)), d, verdict(d <= t["dram_load_slowdown_pct"],
                                       "by %.1f points" % (d - 5))))
    for name, tr in run["traces"].items():
        a, b = tr.get("without", {}), tr.get("with", {})
        if a and b and a["token_hit_rate"]:
            ratio = b["token_hit_rate"] / a["token_hit_rate"]
            out.append("| trace %s: hit rate with ≥ 3 × without | %.2f× | %s |" % (
                name, ratio, verdict(ratio >= 3, "%.2f× short" % (3 - ratio))))
    return "\n".join(out)


def merge(run):
    jpath = ROOT / "docs/benchmarks.json"
    report = json.loads(jpath.read_text())
    entry = report.get("disk_tier") or {}
    entry.setdefault("runs", {})[run["label"]] = run
    entry["targets"] = TARGETS
    report["disk_tier"] = entry
    jpath.write_text(json.dumps(report, indent=2) + "\n")
    block = ["<!-- disk-tier-begin -->",
             "Written by `tests/bench/tier_e2e_report.py` from `tests/bench/run_tier_e2e_bench.sh` "
             "(`tier_e2e_bench`: the real kvoffloadd, host backend, with `--disk_tier_path`; the "
             "C++ client; defaults queue depth 32, write depth 16, 8 spills in flight). Ceiling = "
             "the device's own O_DIRECT GB/s in the same run, block = row + 4 KiB (one record), "
             "writes at the spill depth (8), reads at 32; GB/s = 10^9 payload bytes/s. Spill = "
             "the drain once the stores are over (the tier alone); promote = one Lookup of the "
             "whole prefix → every key HIT (polled every 1 ms); 'promoted + loaded' adds "
             "PrepareLoad + one load job (host backend: a CPU memcpy) + CompleteLoad, blocks "
             "compared byte for byte. Also `disk_tier` of docs/benchmarks.json.", ""]
    for label in sorted(entry["runs"]):
        block += [table(entry["runs"][label]), ""]
    block.append("<!-- disk-tier-end -->")
    mpath = ROOT / "docs/benchmarks.md"
    md = mpath.read_text()
    text = "\n".join(block)
    if "<!-- disk-tier-begin -->" in md:
        head, rest = md.split("<!-- disk-tier-begin -->", 1)
        md = head + text + rest.split("<!-- disk-tier-end -->", 1)[1]
    else:
        md = md.rstrip("\n") + "\n\n## Disk tier end to end (spill, promote, hit rate)\n\n" + \
            text + "\n"
    mpath.write_text(md)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--label", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--print-only", action="store_true")
    args = ap.parse_args()
    run = summarize(pathlib.Path(args.run_dir).resolve(), args.label, args.commit, args.date)
    print(table(run))
    if not args.print_only:
        merge(run)


if __name__ == "__main__":
    main()
