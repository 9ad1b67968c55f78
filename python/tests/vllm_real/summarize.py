#!/usr/bin/env python3
"""Turns one generation's driver.py output into the compact notes of a run record (runs/<run>/SUMMARY.md):
the scenario table and the admission-steps table against vLLM's own CPU manager.

    summarize.py RUN.log --title TEXT [--header-file FILE] > README.md

Every line it prints comes from RUN.log except the title and the header file's text (what ran:
commits, binaries, plugin state). A FAIL scenario's checks, notes and first traceback lines are
quoted in full, so the summary stands without the raw log.
"""

import argparse
import re
import sys

SCEN = re.compile(r"^(PASS|FAIL) (\S+) (\S+)\s+\(([\d.]+) s\) exceptions into vLLM: (\d+) .*?"
                  r"harness errors: (\d+), wrong bytes: (\d+) in (\d+) blocks, loads verified: "
                  r"(\d+) \((\d+) blocks\), requests failed by vLLM: (\d+)")
ADM = re.compile(r"note: ADMISSION (\S+): vLLM CPU admit (\S+) run (\S+) \(local (\S+), ext (\S+)\)"
                 r" \| kvoffload admit (\S+) run (\S+) \(local (\S+), ext (\S+)\)")


def parse(lines):
    scen, cur = [], None
    for line in lines:
        m = SCEN.match(line)
        if m:
            cur = {"status": m.group(1), "gen": m.group(2), "name": m.group(3),
                   "secs": float(m.group(4)), "exc": int(m.group(5)), "harness": int(m.group(6)),
                   "wrong": int(m.group(7)), "loads": int(m.group(9)),
                   "blocks": int(m.group(10)), "failed_reqs": int(m.group(11)), "body": []}
            scen.append(cur)
        elif cur is not None and line.startswith("    "):
            cur["body"].append(line.rstrip("\n"))
        elif cur is not None:
            cur = None
    return scen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--title", required=True)
    ap.add_argument("--header-file")
    a = ap.parse_args()
    with open(a.log) as f:
        lines = f.readlines()
    scen = parse(lines)
    out = ["# " + a.title, ""]
    if a.header_file:
        with open(a.header_file) as f:
            out += [f.read().rstrip(), ""]
    p = sum(1 for s in scen if s["status"] == "PASS")
    out += ["Result: **%d passed, %d failed**; exceptions into vLLM: %d; wrong bytes: %d." % (
        p, len(scen) - p, sum(s["exc"] for s in scen), sum(s["wrong"] for s in scen)), ""]
    out += ["| scenario | result | s | exceptions into vLLM | harness errors | wrong bytes | "
            "loads verified (blocks) | requests failed by vLLM |", "|---|---|---|---|---|---|---|---|"]
    for s in scen:
        out.append("| `%s` | %s | %.1f | %d | %d | %d | %d (%d) | %d |" % (
            s["name"], s["status"], s["secs"], s["exc"], s["harness"], s["wrong"], s["loads"],
            s["blocks"], s["failed_reqs"]))
    adm = [ADM.search(l) for l in lines]
    adm = [m for m in adm if m]
    if adm:
        out += ["", "Admission steps (`admission_steps`: one trace, steps from arrival to "
                "admission / to the first computing step; 1 = the first step after arrival):", "",
                "| request | vLLM CPU manager: admit | run | local+ext tokens | kvoffload: admit | "
                "run | local+ext tokens | admit equal |", "|---|---|---|---|---|---|---|---|"]
        for m in adm:
            g = m.groups()
            out.append("| %s | %s | %s | %s+%s | %s | %s | %s+%s | %s |" % (
                g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8],
                "yes" if g[1] == g[5] else "**no**"))
    notes = []
    for s in scen:
        if s["name"] in ("pending_lookup", "shared_prefix_running", "reset_cache", "decode_blocks"):
            notes += ["- `%s`: %s" % (s["name"], l.strip()) for l in s["body"]
                      if l.strip().startswith(("note:", "[ok]", "[FAILED]")) and
                      not l.strip().endswith("drained")]
    if notes:
        out += ["", "Notes from the admission-related scenarios:", ""] + notes
    for s in scen:
        if s["status"] == "FAIL":
            out += ["", "FAIL `%s`:" % s["name"], "", "```"]
            body = [l for l in s["body"] if not l.startswith("      |")]
            tb = [l for l in s["body"] if l.startswith("      |")][-12:]
            out += body[:40] + tb + ["```"]
    tail = [l.rstrip("\n") for l in lines if re.match(r"^    vllm/\S+ [0-9a-f]{64}$", l)]
    if tail:
        out += ["", "vLLM files executed (sha256):", "", "```"] + [l.strip() for l in tail] + ["```"]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
