#!/usr/bin/env python3
"""Puts one pool_trace_bench run (pools) into docs/benchmarks.json as `shared_pool`,
keeping every other key, and prints the markdown table for docs/benchmarks.md.

  bazel-bin/tests/bench/pool_trace_bench --json > run.jsonl
  python3 tests/bench/pool_trace_report.py run.jsonl --commit SHA
"""
import argparse
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
KEYS = ["replicas", "routing", "budget_bytes", "private_token_hit_rate", "pool_token_hit_rate",
        "private_request_hit_rate", "pool_request_hit_rate", "private_bytes_stored",
        "pool_bytes_stored", "private_evictions", "pool_evictions"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--commit", required=True)
    args = ap.parse_args()
    rows = [json.loads(l) for l in pathlib.Path(args.run).read_text().splitlines() if l.startswith("{")]
    path = ROOT / "docs/benchmarks.json"
    report = json.loads(path.read_text()) if path.exists() else {}
    report["shared_pool"] = [{k: r[k] for k in KEYS} for r in rows]
    report["shared_pool_run"] = {"commit": args.commit, "seed": rows[0]["seed"],
                                 "requests": rows[0]["requests"],
                                 "generator": "tests/bench/pool_trace_bench.cc"}
    path.write_text(json.dumps(report, indent=2) + "\n")
    gib = 1 << 30
    print("| budget | replicas | routing | token hit: private | pool | pool/private | "
          "request hit: private | pool | bytes stored: private | pool | evictions: private | pool |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["pool_token_hit_rate"] / r["private_token_hit_rate"] if r["private_token_hit_rate"] else 0
        print(f"| {r['budget_bytes'] / gib:.1f} GiB | {r['replicas']} | {r['routing']} | "
              f"{100 * r['private_token_hit_rate']:.1f} % | {100 * r['pool_token_hit_rate']:.1f} % | "
              f"{ratio:.2f}x | {100 * r['private_request_hit_rate']:.1f} % | "
              f"{100 * r['pool_request_hit_rate']:.1f} % | {r['private_bytes_stored'] / gib:.0f} GiB | "
              f"{r['pool_bytes_stored'] / gib:.0f} GiB | {r['private_evictions']} | {r['pool_evictions']} |")


if __name__ == "__main__":
    main()
