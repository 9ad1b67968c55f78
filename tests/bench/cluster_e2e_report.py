#!/usr/bin/env python3
"""Puts a run of tests/bench/run_cluster_e2e_bench.sh into docs/benchmarks.json as `cluster_tier`
(keeping every other key) and rewrites docs/benchmarks.md between <!-- cluster-tier-begin --> and
<!-- cluster-tier-end --> (section "## Cluster tier end to end", added before "## Shared pool"
the first time).

  python3 tests/bench/cluster_e2e_report.py RUN_DIR --commit SHA --date YYYY-MM-DD \
      [--run runs/…] [--print-only]

RUN_DIR holds trace.jsonl, bandwidth.jsonl and machine.txt (cluster_e2e_bench's JSON lines).
--print-only prints the markdown block and writes nothing.
"""
import argparse
import json
import pathlib
import statistics

ROOT = pathlib.Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- cluster-tier-begin -->", "<!-- cluster-tier-end -->"
HEADING = "## Cluster tier end to end (nodes sharing a Redis Cluster)"
ANCHOR = "## Shared pool"  # the section goes before it (the disk tier's goes at the end)
TARGETS = {"spill_ratio_to_redis_benchmark_set": 0.8, "promote_ratio_to_redis_benchmark_get": 0.8,
           "second_over_first_node_hit_rate": 0.9, "wrong_bytes": 0,
           "lookups_delayed_past_bound_with_a_master_down": 0}


def lines(path):
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def one(rows, phase, **match):
    for r in rows:
        if r.get("phase") == phase and all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def strip_nodes(r):
    return {k: v for k, v in r.items() if k != "per_node"} if r else None


def summarize(run_dir, commit, date, run_path):
    trace = lines(run_dir / "trace.jsonl")
    bw = lines(run_dir / "bandwidth.jsonl")
    machine = (run_dir / "machine.txt").read_text() if (run_dir / "machine.txt").exists() else ""
    rounds = [r for r in bw if r.get("phase") == "round"]
    s = {"commit": commit, "date": date, "run": run_path,
         "machine": (one(trace, "machine") or one(bw, "machine") or {}).get("machine"),
         "machine_txt": machine.strip().splitlines()}
    if rounds:
        r0 = rounds[0]
        s["bandwidth"] = {
            "row_bytes": r0["row_bytes"], "rows_per_round": r0["rows"], "clients": r0["clients"],
            "rounds": len(rounds),
            "redis_benchmark_set_gbps": statistics.median(r["redis_benchmark_set_gbps"] for r in rounds),
            "redis_benchmark_set_new_keys_gbps": statistics.median(
                r["redis_benchmark_set_new_keys_gbps"] for r in rounds),
            "redis_benchmark_get_gbps": statistics.median(r["redis_benchmark_get_gbps"] for r in rounds),
            "spill_gbps": statistics.median(r["spill_gbps"] for r in rounds),
            "promote_gbps": statistics.median(r["promote_gbps"] for r in rounds),
            "spill_ratio": statistics.median(r["spill_ratio"] for r in rounds),
            "spill_ratio_new_keys": statistics.median(r["spill_ratio_new_keys"] for r in rounds),
            "promote_ratio": statistics.median(r["promote_ratio"] for r in rounds),
            "spill_ratios": [r["spill_ratio"] for r in rounds],
            "spill_ratios_new_keys": [r["spill_ratio_new_keys"] for r in rounds],
            "promote_ratios": [r["promote_ratio"] for r in rounds],
            "wrong_bytes": sum(r["wrong_bytes"] for r in rounds),
            "rows_checked": sum(r["rows_checked"] for r in rounds),
            "per_round": rounds}
    s["prefix"] = one(bw, "prefix")
    s["master_down"] = one(bw, "master_down")
    s["trace_with"] = one(trace, "trace", tier=True)
    s["trace_without"] = one(trace, "trace", tier=False)
    s["trace_summary"] = one(trace, "trace_summary")
    wrong = 0
    for part in (s.get("bandwidth"), s["prefix"], s["master_down"], s["trace_with"],
                 s["trace_without"]):
        if part:
            wrong += part.get("wrong_bytes", 0)
    s["wrong_bytes"] = wrong
    s["targets"] = TARGETS
    s["verdicts"] = verdicts(s)
    return s


def verdicts(s):
    v = {}
    b = s.get("bandwidth")
    if b:
        v["spill_ratio_to_redis_benchmark_set"] = b["spill_ratio"] >= TARGETS[
            "spill_ratio_to_redis_benchmark_set"]
        v["promote_ratio_to_redis_benchmark_get"] = b["promote_ratio"] >= TARGETS[
            "promote_ratio_to_redis_benchmark_get"]
    t = s.get("trace_with")
    if t:
        v["second_over_first_node_hit_rate"] = t["foreign_over_own"] >= TARGETS[
            "second_over_first_node_hit_rate"]
        strict = t["foreign_first_hit_rate"] / t["own_hit_rate"] if t["own_hit_rate"] else 0
        v["second_over_first_node_hit_rate_first_requests"] = strict >= TARGETS[
            "second_over_first_node_hit_rate"]
    v["wrong_bytes"] = s["wrong_bytes"] == 0
    m = s.get("master_down")
    if m:
        v["lookups_delayed_past_bound_with_a_master_down"] = m["lookups_over_bound_plus_slack"] == 0
    return v


def verdict(ok, why=""):
    return "met" if ok else ("missed" + (f" ({why})" if why else ""))


def fmt_ratios(xs):
    return ", ".join(f"{x:.2f}" for x in xs)


def table(s):
    out = []
    b, p, m = s.get("bandwidth"), s.get("prefix"), s.get("master_down")
    tw, tn = s.get("trace_with"), s.get("trace_without")
    out.append(f"Commit `{s['commit']}`, {s['date']}, run `{s['run']}`; "
               f"machine {json.dumps(s['machine'])}.")
    out.append("")
    out.append("| figure | value | target | verdict |")
    out.append("|---|---|---|---|")
    if b:
        mib = b["row_bytes"] / 2**20
        out.append(
            f"| spill through the daemon (node A: {b['rows_per_round']} rows of {mib:g} MiB, first "
            f"commit → Admin.Stats cluster spills settled) against redis-benchmark SET "
            f"(-d {b['row_bytes']} -c {b['clients']} -r 64) | medians {b['spill_gbps']:.3f} GB/s "
            f"vs {b['redis_benchmark_set_gbps']:.3f}; ratio {b['spill_ratio']:.2f} (median of the "
            f"rounds' ratios: "
            f"{fmt_ratios(b['spill_ratios'])}); vs redis-benchmark SET of new keys "
            f"(-r 10^9) {b['redis_benchmark_set_new_keys_gbps']:.3f} = "
            f"{b['spill_ratio_new_keys']:.2f} ({fmt_ratios(b['spill_ratios_new_keys'])}) | ≥ 0.80 | "
            f"{verdict(s['verdicts']['spill_ratio_to_redis_benchmark_set'])} |")
        out.append(
            f"| promote through the daemon (node B: one Lookup of the {b['rows_per_round']} rows "
            f"→ all HIT, polled every 1 ms) against redis-benchmark GET | "
            f"medians {b['promote_gbps']:.3f} GB/s vs {b['redis_benchmark_get_gbps']:.3f}; ratio "
            f"{b['promote_ratio']:.2f} (rounds: {fmt_ratios(b['promote_ratios'])}) | ≥ 0.80 | "
            f"{verdict(s['verdicts']['promote_ratio_to_redis_benchmark_get'])} |")
    if p:
        out.append(
            f"| a {p['tokens_llama3_8b']}-token Llama-3-8B prefix ({p['rows']} rows × "
            f"{p['row_bytes'] / 2**20:g} MiB = {p['bytes'] / 2**30:g} GiB) stored on node A, "
            f"promoted on node B | first Lookup {p['first_lookup_ms']:.1f} ms "
            f"({p['found_by_first_lookup']}/{p['rows']} found); promoted in "
            f"{p['promote_seconds']:.2f} s ({p['promote_gbps']:.2f} GB/s); promoted + loaded "
            f"{p['promoted_and_loaded_s']:.2f} s (the load alone {p['load_only_s']:.2f} s, "
            f"{p['load_batch']} rows a job) | — | — |")
    if tw and tn:
        out.append(
            f"| trace: {tw['nodes']} nodes, cache-blind random router, {tw['requests']} requests "
            f"({tw['docs']} shared prefixes of {tw['doc_blocks']} blocks, Zipf 1.1; "
            f"{tw['conversations']} conversations up to {tw['conv_blocks']} blocks; "
            f"{tw['row_bytes'] >> 10} KiB rows; region {tw['region_rows']} rows a node, working "
            f"set {tw['working_set_rows']}) — token hit rate | with the tier "
            f"{tw['token_hit_rate']:.3f}, without {tn['token_hit_rate']:.3f} | — | — |")
        out.append(
            f"| second node / first node hit rate (blocks another node computed first / blocks "
            f"this node computed first; first requests anywhere excluded) | with the tier "
            f"{tw['foreign_hit_rate']:.3f} / {tw['own_hit_rate']:.3f} = "
            f"{tw['foreign_over_own']:.3f}; without {tn['foreign_hit_rate']:.3f} / "
            f"{tn['own_hit_rate']:.3f} = {tn['foreign_over_own']:.3f} | ≥ 0.9 | "
            f"{verdict(s['verdicts']['second_over_first_node_hit_rate'])} |")
        strict = tw["foreign_first_hit_rate"] / tw["own_hit_rate"] if tw["own_hit_rate"] else 0
        out.append(
            f"| the same, counting only a node's first request of each block another node "
            f"computed (without the tier always a miss) | with the tier "
            f"{tw['foreign_first_hit_rate']:.3f} ({tw['foreign_first_blocks']} blocks) / "
            f"{tw['own_hit_rate']:.3f} = {strict:.3f}; without "
            f"{tn['foreign_first_hit_rate']:.3f} | ≥ 0.9 | "
            f"{verdict(s['verdicts']['second_over_first_node_hit_rate_first_requests'])} |")
        out.append(
            f"| Lookup RPC latency at the client (p50 / p99 / max), trace | with the tier "
            f"{tw['lookup']['p50_ms']:.2f} / {tw['lookup']['p99_ms']:.2f} / "
            f"{tw['lookup']['max_ms']:.2f} ms ({tw['lookup']['n']} lookups, "
            f"{tw['steps_waited']} 5 ms steps waited on HIT_PENDING, {tw['waits_exhausted']} "
            f"waits given up); without {tn['lookup']['p50_ms']:.2f} / "
            f"{tn['lookup']['p99_ms']:.2f} / {tn['lookup']['max_ms']:.2f} ms | — | — |")
    if m:
        out.append(
            f"| a master SIGSTOPped: {m['prefixes']} prefixes of {m['prefix_rows']} rows looked up "
            f"and loaded on a fresh node over {m['window_s']:.1f} s (failover included) — Lookup "
            f"RPC p50 / p99 / max | {m['lookup']['p50_ms']:.1f} / {m['lookup']['p99_ms']:.1f} / "
            f"{m['lookup']['max_ms']:.1f} ms against --cluster_tier_lookup_timeout_ms "
            f"{m['lookup_timeout_ms']}: {m['lookups_over_bound_plus_slack']} of "
            f"{m['lookup']['n']} past the bound + {m['bound_slack_ms']} ms "
            f"({m['lookups_over_bound']} past the bound itself); prefixes fully / partly / not "
            f"hit {m['prefixes_fully_hit']} / {m['prefixes_partly_hit']} / "
            f"{m['prefixes_missed']}, first full hit {m['first_full_hit_after_s']:.1f} s after "
            f"the freeze | 0 steps delayed past the bound | "
            f"{verdict(s['verdicts']['lookups_delayed_past_bound_with_a_master_down'])} |")
    checked = sum((x or {}).get("rows_checked", 0) for x in (b, p, m, tw, tn))
    out.append(f"| wrong bytes in loaded rows (each row compared with its key's pattern) | "
               f"{s['wrong_bytes']} of {checked} rows checked | 0 | "
               f"{verdict(s['verdicts']['wrong_bytes'])} |")
    if tw and tn:
        out += ["", "Per node (the trace; hit rates with the tier / without; Lookup RPC at the "
                "client, with the tier):", "",
                "| node | blocks requested | token hit rate | own blocks' hit rate | others' "
                "blocks' hit rate | first requests of others' blocks | Lookup p50 / p99 ms |",
                "|---|---:|---|---|---|---|---|"]
        for a, z in zip(tw["per_node"], tn["per_node"]):
            out.append(
                f"| {a['node']} | {a['blocks_requested']} | {a['token_hit_rate']:.3f} / "
                f"{z['token_hit_rate']:.3f} | {a['own_hit_rate']:.3f} / {z['own_hit_rate']:.3f} | "
                f"{a['foreign_hit_rate']:.3f} / {z['foreign_hit_rate']:.3f} | "
                f"{a['foreign_first_hit_rate']:.3f} / {z['foreign_first_hit_rate']:.3f} | "
                f"{a['lookup']['p50_ms']:.2f} / {a['lookup']['p99_ms']:.2f} |")
    return "\n".join(out)


def block(s):
    return "\n".join([
        BEGIN,
        "Written by `tests/bench/cluster_e2e_report.py` from `tests/bench/run_cluster_e2e_bench.sh` "
        "(`cluster_e2e_bench`: real kvoffloadd processes, host backend, each a node with its own "
        "runtime directory and `--cluster_tier` pointing at one local 3-master + 3-replica Redis "
        "Cluster on loopback; the C++ SchedulerClient and a worker of the bench). GB/s = 10^9 "
        "payload bytes/s; ratios are per round (redis-benchmark and the daemon one right after the "
        "other), the median. Also `cluster_tier` of docs/benchmarks.json.",
        "",
        table(s),
        END])


def merge(s):
    jpath = ROOT / "docs/benchmarks.json"
    report = json.loads(jpath.read_text())
    slim = dict(s)
    for k in ("trace_with", "trace_without"):
        slim[k] = strip_nodes(s.get(k))
    if "cluster_tier" in report:
        report["cluster_tier"] = slim
    else:  # after shared_pool_run, not at the end (where other sections are appended)
        out = {}
        for k, v in report.items():
            out[k] = v
            if k == "shared_pool_run":
                out["cluster_tier"] = slim
        out.setdefault("cluster_tier", slim)
        report = out
    jpath.write_text(json.dumps(report, indent=2) + "\n")
    mpath = ROOT / "docs/benchmarks.md"
    md = mpath.read_text()
    text = block(s)
    if BEGIN in md:
        head, rest = md.split(BEGIN, 1)
        md = head + text + rest.split(END, 1)[1]
    elif ANCHOR in md:
        head, rest = md.split(ANCHOR, 1)
        md = head + HEADING + "\n\n" + text + "\n\n" + ANCHOR + rest
    else:
        md = md.rstrip("\n") + "\n\n" + HEADING + "\n\n" + text + "\n"
    mpath.write_text(md)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--run", default=None, help="the run's directory as cited (default: run_dir)")
    ap.add_argument("--print-only", action="store_true")
    args = ap.parse_args()
    run_dir = pathlib.Path(args.run_dir).resolve()
    s = summarize(run_dir, args.commit, args.date, args.run or args.run_dir)
    print(block(s))
    if not args.print_only:
        merge(s)


if __name__ == "__main__":
    main()
