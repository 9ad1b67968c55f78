#!/usr/bin/env python3
"""Puts the durable regions' restart figures into docs/benchmarks.json as `restart` (and `restart_run`),
keeping every other key, and rewrites the table of docs/benchmarks.md between
<!-- restart-begin --> and <!-- restart-end --> ("## Restart survival").

  python3 tests/bench/restart_report.py \
      --restart_test_log bazel-testlogs/tests/integration/restart_test/test.log \
      --restart_pin OUT/restart.jsonl --commit SHA --date YYYY-MM-DD \
      --device "$(cat OUT/device.txt)"
  python3 tests/bench/restart_report.py --self_test     the parsing and the figures, on samples

Sources, one per figure (the markdown names each figure's):
  --restart_test_log  the log of //tests/integration:restart_test (host backend, kvoffloadd under
                      kvoffload-supervise): its "restart-figure name=value" lines and the gtest
                      verdicts ("[       OK ] RestartTest.X", "[  FAILED  ] RestartTest.X").
  --restart_pin       (optional) the JSON lines of //tests/gpu:restart_pin_bench, stage restart_pin
                      of tests/gpu_e2e/run_on_device.sh (OUT/restart.jsonl). Without it the H200
                      figures are null and the markdown says "not run".
  durable overhead    computed, not measured: the state file's layout (daemon/restart/state_file.h:
                      a header of two 4 KiB pages for a usual spec, then one record of
                      round_up(24 + --state_key_bytes, 8) bytes per row).
"""
import argparse
import datetime
import json
import os
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- restart-begin -->", "<!-- restart-end -->"

# Every name restart_test.cc prints (the self test checks the list against the source). Note that
# its `region_gib` is the READY data before the clean restart (ready_rows × row bytes), not a
# region size: `restart.region_gib` is the H200 region's.
TEST_FIGURES = ["clean_restart_ms", "clean_restart_start_to_ready_ms", "ready_rows", "region_gib",
                "clean_restart_hit_rate", "verify_s", "crash_points", "crash_rows_verified",
                "crash_rows_served_wrong", "crash_committed_rows_checked",
                "crash_committed_rows_distinct", "crash_committed_restored_rate",
                "kill_to_ready_ms_mean"]
COUNTS = {"ready_rows", "crash_points", "crash_rows_verified", "crash_rows_served_wrong",
          "crash_committed_rows_checked", "crash_committed_rows_distinct"}
CLEAN_TEST = "RestartTest.CleanRestartUnderLoadKeepsEveryReadyRowByteExact"
CRASH_TEST = "RestartTest.SigkillAtRandomPointsServesNoWrongRow"

# The state file (daemon/restart/state_file.{h,cc}; the self test checks these against it).
STATE_PAGE = 4096          # kPage
STATE_RECORD_FIXED = 24    # kRecordFixedBytes: state, ticket, seq, checksum, key size
STATE_KEY_BYTES = 40       # StateFile::kDefaultKeyCapacity, the daemon's --state_key_bytes
STATE_KEY_BYTES_MIN = 8    # StateFile::kMinKeyCapacity
# HeaderBytes(): round_up(256 + spec + fingerprint, 4 KiB) + the layout page; 8 KiB while the
# serialized spec and the fingerprint take at most 3840 bytes (state_file_test: 8192).
STATE_HEADER_BYTES = 2 * STATE_PAGE
BENCH_ROW_BYTES = 2 << 20  # kRowBytes of tests/gpu/restart_pin_bench.cc
DEFAULT_PIN_PAUSE_US = 1000  # RegionOptions.adopted_pin_pause_us (daemon/region/region.h)
ROW_SIZES = [4096, 13 << 10, 64 << 10, 2 << 20]
HEADLINE_GIB = 64          # the region the first-row target is for
TARGETS = {"first_row_usable_ms": 100.0, "first_row_usable_region_gib": HEADLINE_GIB,
           "clean_restart_hit_rate": 1.0, "crash_rows_served_wrong": 0,
           "crash_committed_restored_rate": 0.99, "durable_overhead_pct": 0.5}
PHASES = ("first_start", "after_restart")
FIGURE = re.compile(r"restart-figure ([A-Za-z0-9_]+)=(\S+)")
GTEST = re.compile(r"^\[\s*(OK|FAILED)\s*\] ([A-Za-z0-9_]+\.[A-Za-z0-9_/]+)( \(\d+ ms\))?$")


# ---- inputs -------------------------------------------------------------------------------

def parse_test_log(text):
    """(figures, results): the last value of every "restart-figure" line (counts as int), and
    each test's gtest verdict, "OK" or "FAILED" (a FAILED anywhere wins)."""
    figures, results = {}, {}
    for line in text.splitlines():
        m = FIGURE.search(line)
        if m:
            v = float(m.group(2))
            figures[m.group(1)] = int(v) if m.group(1) in COUNTS and v == int(v) else v
            continue
        m = GTEST.match(line.strip())
        if m and results.get(m.group(2)) != "FAILED":
            results[m.group(2)] = m.group(1)
    return figures, results


def parse_pin(text):
    """restart_pin_bench's JSON lines, in order."""
    runs = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            if r.get("bench", "restart_pin") == "restart_pin" and r.get("phase") in PHASES:
                runs.append(r)
    return runs


# ---- figures ------------------------------------------------------------------------------

def record_bytes(key_bytes):
    return (STATE_RECORD_FIXED + key_bytes + 7) // 8 * 8


def overhead_pct(row_bytes, region_bytes, key_bytes=STATE_KEY_BYTES):
    """State file bytes (header + one record per row) per region byte, in %."""
    rows = region_bytes // row_bytes
    return round(100.0 * (STATE_HEADER_BYTES + rows * record_bytes(key_bytes)) / region_bytes, 4)


def min_row_bytes(key_bytes):
    """The smallest row whose record is within the target (the header aside)."""
    return round(record_bytes(key_bytes) * 100 / TARGETS["durable_overhead_pct"])


def usable_ms(r):
    """first_row_usable_ms, None where the bench printed -1 (no row usable when Open returned)."""
    v = r.get("first_row_usable_ms") if r else None
    return None if v is None or v < 0 else v


def loads_while_pinning(x):
    """'n / p50 / max ms' of a restart_pin line's probe loads while pinning; — before they were
    measured (lines without the fields) or when the region was pinned before the first."""
    n = x.get("loads_while_pinning")
    if not n:
        return "—"
    return f"{n} / {x['load_p50_ms']:.2f} / {x['load_max_ms']:.2f} ms"


def pick(runs, phase, gib):
    """Index of the run the headline takes: that phase and region, THP on, the daemon's default
    pause between pins after a restart, the region unbound (the daemon's --region_numa_node=-1)
    where there is one; of several, the slowest first row."""
    cands = [i for i, r in enumerate(runs)
             if r["phase"] == phase and r["region_gib"] == gib and r.get("thp") == 1
             and r.get("pause_us", -1) in (-1, DEFAULT_PIN_PAUSE_US)]
    unbound = [i for i in cands if runs[i].get("numa_node", -1) == -1]
    cands = unbound or cands
    if not cands:
        return None
    return max(cands, key=lambda i: float("inf") if usable_ms(runs[i]) is None
               else usable_ms(runs[i]))


def build(figures, results, pins):
    """The `restart` object of docs/benchmarks.json."""
    f = figures.get
    if pins:
        sizes = {r["region_gib"] for r in pins}
        gib = HEADLINE_GIB if HEADLINE_GIB in sizes else max(sizes)
        chosen = {p: pick(pins, p, gib) for p in PHASES}
    else:
        gib, chosen = None, {p: None for p in PHASES}
    run_of = {p: pins[i] if i is not None else None for p, i in chosen.items()}
    basis_gib = gib or HEADLINE_GIB
    region = basis_gib << 30
    restart = {
        "ready_rows": f("ready_rows"),
        "clean_restart_hit_rate": f("clean_restart_hit_rate"),
        "crash_points": f("crash_points"),
        "crash_rows_served_wrong": f("crash_rows_served_wrong"),
        "crash_committed_restored_rate": f("crash_committed_restored_rate"),
        "first_row_usable_ms": {p: usable_ms(run_of[p]) for p in PHASES},
        "region_gib": gib,
        "fully_pinned_s": {p: run_of[p]["fully_pinned_s"] if run_of[p] else None for p in PHASES},
        "durable_overhead_pct": overhead_pct(BENCH_ROW_BYTES, region),
        # extras
        "first_load_ms": {p: run_of[p]["first_load_ms"] if run_of[p] else None for p in PHASES},
        "load_while_pinning_max_ms": {p: run_of[p].get("load_max_ms") if run_of[p] else None
                                      for p in PHASES},
        "context_ms": {p: run_of[p]["context_ms"] if run_of[p] else None for p in PHASES},
        "pin_selected": {p: chosen[p] for p in PHASES},
        "pin_bytes_verified": sum(r.get("bytes_verified", 0) for r in pins) if pins else None,
        "pin_mismatches": sum(r.get("mismatches", 0) for r in pins) if pins else None,
        "pin_after_restart_bytes_verified": sum(r.get("bytes_verified", 0) for r in pins
                                                if r["phase"] == "after_restart") if pins else None,
        "pin_after_restart_mismatches": sum(r.get("mismatches", 0) for r in pins
                                            if r["phase"] == "after_restart") if pins else None,
        "pin_errors": [r["error"] for r in pins if r.get("error")],
        "pin_runs": pins,
        "durable_overhead_basis": {"region_gib": basis_gib, "row_bytes": BENCH_ROW_BYTES,
                                   "state_key_bytes": STATE_KEY_BYTES,
                                   "record_bytes": record_bytes(STATE_KEY_BYTES),
                                   "header_bytes": STATE_HEADER_BYTES},
        "durable_overhead_pct_by_row_bytes": {str(b): overhead_pct(b, region) for b in ROW_SIZES},
        "durable_overhead_pct_by_row_bytes_key8": {
            str(b): overhead_pct(b, region, STATE_KEY_BYTES_MIN) for b in ROW_SIZES},
        "durable_target_min_row_bytes": {str(k): min_row_bytes(k)
                                         for k in (STATE_KEY_BYTES, STATE_KEY_BYTES_MIN)},
        "restart_test_figures": figures,
        "restart_test_results": results,
        "targets": TARGETS,
    }
    restart["verdicts"] = verdicts(restart)
    return restart


# ---- verdicts -----------------------------------------------------------------------------

def at_most(value, target, unit, nd=1):
    if value is None:
        return "not measured"
    if value <= target:
        return f"met ({target - value:.{nd}f} {unit} under)"
    return f"missed by {value - target:.{nd}f} {unit} ({value / target:.2f}× the target)"


def verdicts(r):
    res = r["restart_test_results"]
    out = {}
    for p in PHASES:
        v = r["first_row_usable_ms"][p]
        if r["region_gib"] is None:
            out[f"first_row_usable_ms.{p}"] = "not run"
        elif r["pin_selected"][p] is not None and v is None:
            out[f"first_row_usable_ms.{p}"] = "missed (no row usable when the region was opened)"
        elif r["region_gib"] < HEADLINE_GIB:
            out[f"first_row_usable_ms.{p}"] = (f"not judged: no {HEADLINE_GIB} GiB run (largest "
                                               f"{r['region_gib']} GiB)")
        else:
            out[f"first_row_usable_ms.{p}"] = at_most(v, TARGETS["first_row_usable_ms"], "ms")
    rate = r["clean_restart_hit_rate"]
    if rate is None:
        out["clean_restart_hit_rate"] = "not measured"
    elif rate >= 1.0 and res.get(CLEAN_TEST) != "FAILED":
        out["clean_restart_hit_rate"] = "met"
    elif rate < 1.0:
        out["clean_restart_hit_rate"] = f"missed by {100 * (1 - rate):.1f} points"
    else:  # 1.000 printed, but the test's own check (every row hits) failed
        out["clean_restart_hit_rate"] = "missed (the test FAILED)"
    wrong = r["crash_rows_served_wrong"]
    out["crash_rows_served_wrong"] = ("not measured" if wrong is None else
                                      "met" if wrong == 0 else f"missed: {wrong} rows served wrong")
    rate = r["crash_committed_restored_rate"]
    target = TARGETS["crash_committed_restored_rate"]
    out["crash_committed_restored_rate"] = (
        "not measured" if rate is None else
        f"met ({100 * (rate - target):.1f} points over)" if rate >= target else
        f"missed by {100 * (target - rate):.1f} points")
    out["durable_overhead_pct"] = at_most(r["durable_overhead_pct"],
                                          TARGETS["durable_overhead_pct"], "points", 4)
    return out


# ---- markdown -----------------------------------------------------------------------------

def human(nbytes):
    if nbytes >= 1 << 30 and nbytes % (1 << 30) == 0:
        return f"{nbytes >> 30} GiB"
    if nbytes >= 1 << 20 and nbytes % (1 << 20) == 0:
        return f"{nbytes >> 20} MiB"
    if nbytes % 1024 == 0:
        return f"{nbytes >> 10} KiB"
    return f"{nbytes} B"


def fmt(v, nd=1, unit=""):
    return "—" if v is None else f"{v:.{nd}f}{unit}"


def pct(v, nd=1):
    return "—" if v is None else f"{100 * v:.{nd}f} %"


def render(r, run):
    fig = r["restart_test_figures"]
    res = r["restart_test_results"]
    ver = r["verdicts"]
    failed = sorted(t for t, s in res.items() if s == "FAILED")
    lines = [
        f"Written by `tests/bench/restart_report.py` (also `restart` and `restart_run` of "
        f"docs/benchmarks.json). Commit `{run['commit']}`, {run['date']}. "
        f"`restart_test`: the log of `//tests/integration:restart_test` "
        f"({len(res)} tests: {sum(s == 'OK' for s in res.values())} OK"
        + (f", FAILED: {', '.join(failed)}" if failed else "") + "), host backend, on the "
        "machine that ran `bazel test`. "
        + (f"`restart_pin`: `restart_pin_bench` of commit `{run.get('pin_commit') or run['commit']}`"
           f" on {run['device']}." if r["pin_runs"] else
           "`restart_pin`: not run at this commit (the H200 figures are null)."),
        "",
        "| figure | value | source | target | verdict |",
        "|---|---|---|---|---|",
    ]
    ready_gib = fig.get("region_gib")
    lines.append(f"| READY rows before a clean restart | {fmt(r['ready_rows'], 0)}"
                 + (f" ({ready_gib:.2f} GiB)" if ready_gib is not None else "")
                 + " | restart_test `ready_rows`, `region_gib` (the READY bytes) | — | — |")
    lines.append(f"| clean restart: READY rows that hit afterwards, byte-exact | "
                 f"{pct(r['clean_restart_hit_rate'])} | restart_test `clean_restart_hit_rate` | "
                 f"100 % | {ver['clean_restart_hit_rate']} |")
    lines.append(f"| clean restart: SIGHUP → serving again | "
                 f"{fmt(fig.get('clean_restart_ms'), 0, ' ms')} (exec → ready "
                 f"{fmt(fig.get('clean_restart_start_to_ready_ms'), 0, ' ms')}) | restart_test "
                 f"`clean_restart_ms`, `clean_restart_start_to_ready_ms` | — | — |")
    lines.append(f"| SIGKILL points in the store/load soak | {fmt(r['crash_points'], 0)} | "
                 f"restart_test `crash_points` | — | — |")
    lines.append(f"| rows served wrong after a SIGKILL | {fmt(r['crash_rows_served_wrong'], 0)} "
                 f"(of {fmt(fig.get('crash_rows_verified'), 0)} rows loaded and compared byte for "
                 f"byte) | restart_test `crash_rows_served_wrong`, `crash_rows_verified` | 0 | "
                 f"{ver['crash_rows_served_wrong']} |")
    lines.append(f"| committed rows restored after a SIGKILL | "
                 f"{pct(r['crash_committed_restored_rate'])} "
                 f"({fmt(fig.get('crash_committed_rows_checked'), 0)} checks of "
                 f"{fmt(fig.get('crash_committed_rows_distinct'), 0)} distinct committed rows) | "
                 f"restart_test `crash_committed_restored_rate` | ≥ 99 % | "
                 f"{ver['crash_committed_restored_rate']} |")
    lines.append(f"| SIGKILL → serving again (mean) | "
                 f"{fmt(fig.get('kill_to_ready_ms_mean'), 0, ' ms')} | restart_test "
                 f"`kill_to_ready_ms_mean` | — | — |")
    gib = r["region_gib"]
    where = (f"restart_pin, {gib} GiB, THP on, region not bound to a node" if gib is not None
             else "restart_pin: not run")
    for p, label in (("first_start", "at first start"), ("after_restart", "after a restart")):
        i = r["pin_selected"][p]
        value = ("not run" if gib is None else "no run" if i is None else
                 f"{fmt(r['first_row_usable_ms'][p], 1, ' ms')} (first load "
                 f"{fmt(r['first_load_ms'][p], 1, ' ms')})")
        lines.append(f"| first row usable, {gib if gib is not None else '—'} GiB region, "
                     f"{label} | {value} | {where}, `{p}` line `first_row_usable_ms`, "
                     f"`first_load_ms` | "
                     f"≤ 100 ms at 64 GiB | {ver['first_row_usable_ms.' + p]} |")
    fp = r["fully_pinned_s"]
    lines.append(f"| fully pinned, {gib if gib is not None else '—'} GiB region | "
                 + ("not run" if gib is None else
                    f"{fmt(fp['first_start'], 2, ' s')} at first start, "
                    f"{fmt(fp['after_restart'], 2, ' s')} after a restart")
                 + f" | {where}, `fully_pinned_s` | — | — |")
    if r["pin_runs"]:
        ar_bytes, ar_bad = r["pin_after_restart_bytes_verified"], r["pin_after_restart_mismatches"]
        fs_bytes, fs_bad = r["pin_bytes_verified"] - ar_bytes, r["pin_mismatches"] - ar_bad
        lines.append(f"| patterned rows (one per chunk and the last), every run | after a restart "
                     f"{human(ar_bytes)} loaded back through the backend, {ar_bad} mismatches; at "
                     f"first start {human(fs_bytes)} stored and compared in the region, {fs_bad} "
                     f"mismatches | restart_pin `bytes_verified`, `mismatches` | 0 mismatches | "
                     f"{'met' if r['pin_mismatches'] == 0 else 'missed'} |")
    b = r["durable_overhead_basis"]
    by = r["durable_overhead_pct_by_row_bytes"]
    by8 = r["durable_overhead_pct_by_row_bytes_key8"]
    lo = r["durable_target_min_row_bytes"]
    lines.append(f"| durable state (state file per region) | {r['durable_overhead_pct']:.4f} % "
                 f"({b['region_gib']} GiB of {human(b['row_bytes'])} rows: "
                 f"{human(b['header_bytes'])} header + {b['record_bytes']} B per row) | computed "
                 f"from the state file layout | ≤ 0.5 % | {ver['durable_overhead_pct']} |")
    worst = by[str(ROW_SIZES[0])]
    lines.append(
        "| durable state by row size | "
        + ", ".join(f"{human(s)} {by[str(s)]:.4f} %" for s in ROW_SIZES)
        + f"; with `--state_key_bytes=8` ({record_bytes(STATE_KEY_BYTES_MIN)} B records): "
        + ", ".join(f"{human(s)} {by8[str(s)]:.4f} %" for s in ROW_SIZES)
        + " | computed, same region | ≤ 0.5 % | "
        f"met from {lo[str(STATE_KEY_BYTES)]:,} B rows ({lo[str(STATE_KEY_BYTES)] / 1024:.2f} KiB; "
        f"{lo[str(STATE_KEY_BYTES_MIN)]:,} B with 8-byte keys); missed at 4 KiB rows by "
        f"{worst - 0.5:.2f} points ({by8[str(ROW_SIZES[0])] - 0.5:.2f} with 8-byte keys) |")
    if r["pin_runs"]:
        p0 = r["pin_runs"][0]
        lines += ["", f"Every `restart_pin_bench` line ({p0.get('chunk_mib')} MiB chunks, "
                  f"{p0.get('threads')} populate threads, {human(BENCH_ROW_BYTES)} rows, "
                  f"{p0.get('numa_nodes')} NUMA node(s); times from `Region::Create`/`Adopt`, "
                  "the CUDA context and one worker already open, its creation in `context ms`; "
                  "after_restart runs once per size and pause between pins, THP as the first "
                  "listed, unbound; loads while pinning: the probe row loaded every 5 ms until "
                  "the region is fully pinned, count / p50 / max):", "",
                  "| phase | region | THP | hugetlb | NUMA node | pin pause µs | context ms | "
                  "first row usable ms | first load ms | loads while pinning | fully pinned s | "
                  "bytes verified | mismatches |",
                  "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for x in r["pin_runs"]:
            node = x.get("numa_node", -1)
            lines.append(
                f"| {x['phase']} | {x['region_gib']} GiB | {'on' if x.get('thp') else 'off'} | "
                f"{'yes' if x.get('hugetlb') else 'no'} | {'any' if node < 0 else node} | "
                f"{'—' if x.get('pause_us', -1) < 0 else x['pause_us']} | "
                f"{fmt(x.get('context_ms'))} | "
                f"{fmt(usable_ms(x)) if x.get('first_row_usable_ms', -1) >= 0 else 'never (-1)'} | "
                f"{fmt(x.get('first_load_ms'))} | {loads_while_pinning(x)} | "
                f"{fmt(x.get('fully_pinned_s'), 2)} | "
                f"{human(x.get('bytes_verified', 0))} | {x.get('mismatches')} |")
        for x in r["pin_runs"]:
            if x.get("error"):
                lines.append(f"- {x['phase']} {x['region_gib']} GiB thp={x.get('thp')}: "
                             f"error `{x['error']}`")
    lines += ["", "In the JSON, `first_row_usable_ms` and `fully_pinned_s` are objects "
              "{first_start, after_restart} for `region_gib`; `pin_runs` holds every line; the "
              "rates are fractions (restart_test prints three decimals, so 1.000 is ≥ 0.9995: "
              "its own assertions demand every row)."]
    return "\n".join(lines) + "\n"


# ---- output -------------------------------------------------------------------------------

def write(docs, restart, run):
    """docs/benchmarks.json: `restart` and `restart_run` replaced, every other key kept;
    docs/benchmarks.md: the text between the markers replaced (the markers must be there)."""
    mpath = docs / "benchmarks.md"
    md = mpath.read_text()
    if md.count(BEGIN) != 1 or md.count(END) != 1 or md.index(BEGIN) > md.index(END):
        sys.exit(f"{mpath}: needs one {BEGIN} ... {END} (in '## Restart survival')")
    jpath = docs / "benchmarks.json"
    report = json.loads(jpath.read_text()) if jpath.exists() else {}
    report["restart"] = restart
    report["restart_run"] = run
    jpath.write_text(json.dumps(report, indent=2) + "\n")
    block = render(restart, run)
    head, rest = md.split(BEGIN, 1)
    mpath.write_text(head + BEGIN + "\n" + block + END + rest.split(END, 1)[1])
    return block


def where(path):
    """The path as the docs name it: under the repository (symlinks such as bazel-testlogs
    kept), else the file's name."""
    path = pathlib.Path(os.path.abspath(path))
    return str(path.relative_to(ROOT)) if ROOT in path.parents else path.name


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self_test", action="store_true")
    ap.add_argument("--restart_test_log")
    ap.add_argument("--restart_pin")
    ap.add_argument("--commit")
    ap.add_argument("--pin_commit", help="the commit restart_pin ran at, when not --commit")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--device", help="the H200 (default: device.txt beside --restart_pin)")
    ap.add_argument("--docs", default=str(ROOT / "docs"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.restart_test_log or not args.commit:
        ap.error("--restart_test_log and --commit are required")
    figures, results = parse_test_log(pathlib.Path(args.restart_test_log).read_text())
    if not figures:
        sys.exit(f"{args.restart_test_log}: no restart-figure lines")
    missing = [n for n in TEST_FIGURES if n not in figures]
    if missing:
        print(f"restart_report: not in the log (null): {', '.join(missing)}", file=sys.stderr)
    pins, device = [], args.device
    if args.restart_pin:
        pin_path = pathlib.Path(args.restart_pin)
        pins = parse_pin(pin_path.read_text())
        if not pins:
            sys.exit(f"{pin_path}: no restart_pin lines (leave --restart_pin out for 'not run')")
        if device is None and (pin_path.parent / "device.txt").exists():
            device = (pin_path.parent / "device.txt").read_text().strip()
    restart = build(figures, results, pins)
    run = {"commit": args.commit, "date": args.date, "device": device if pins else None,
           "pin_commit": (args.pin_commit or args.commit) if pins else None,
           "restart_test_log": where(args.restart_test_log),
           "restart_pin": where(args.restart_pin) if args.restart_pin else None,
           "generator": "tests/bench/restart_report.py"}
    print(write(pathlib.Path(args.docs), restart, run), end="")
    return 0


# ---- self test ----------------------------------------------------------------------------

SAMPLE_LOG = """\
exec ${PAGER:-/usr/bin/less} "$0" || exit 1
Executing tests from //tests/integration:restart_test
-----------------------------------------------------------------------------
[==========] Running 9 tests from 1 test suite.
[ RUN      ] RestartTest.CleanRestartUnderLoadKeepsEveryReadyRowByteExact
restart-figure clean_restart_ms=241.512
restart-figure clean_restart_start_to_ready_ms=18.204
restart-figure ready_rows=2048.000
restart-figure region_gib=0.500
restart-figure clean_restart_hit_rate=1.000
restart-figure verify_s=1.870
[       OK ] RestartTest.CleanRestartUnderLoadKeepsEveryReadyRowByteExact (4120 ms)
[ RUN      ] RestartTest.UpgradeToASecondBinaryKeepsTheRows
[       OK ] RestartTest.UpgradeToASecondBinaryKeepsTheRows (900 ms)
[ RUN      ] RestartTest.SigkillAtRandomPointsServesNoWrongRow
restart-figure crash_points=40.000
restart-figure crash_rows_verified=127344.000
restart-figure crash_rows_served_wrong=0.000
restart-figure crash_committed_rows_checked=101232.000
restart-figure crash_committed_rows_distinct=4880.000
restart-figure crash_committed_restored_rate=0.995
restart-figure kill_to_ready_ms_mean=45.310
[       OK ] RestartTest.SigkillAtRandomPointsServesNoWrongRow (30512 ms)
[ RUN      ] RestartTest.DroppedEngineLeavesTheStore
tests/integration/restart_test.cc:680: Failure
[  FAILED  ] RestartTest.DroppedEngineLeavesTheStore (310 ms)
[==========] 4 tests from 1 test suite ran. (35842 ms total)
[  PASSED  ] 3 tests.
[  FAILED  ] 1 test, listed below:
[  FAILED  ] RestartTest.DroppedEngineLeavesTheStore
"""


def pin_line(phase, gib, thp, node, usable, fully, verified=0, mismatches=0, error="",
             pause_us=None, loads=None):
    extra = {} if pause_us is None else {"pause_us": pause_us}
    if loads:
        extra.update(loads_while_pinning=loads[0], load_p50_ms=loads[1], load_max_ms=loads[2])
    return json.dumps({**extra,
        "bench": "restart_pin", "phase": phase, "region_gib": gib, "chunk_mib": 128,
        "threads": 8, "thp": thp, "hugetlb": 0, "numa_nodes": 2, "numa_node": node,
        "context_ms": 310.0, "open_ms": usable, "first_row_usable_ms": usable,
        "first_load_ms": usable + 2.5, "fully_pinned_s": fully, "ready_bytes": gib << 30,
        "total_bytes": gib << 30, "bytes_verified": verified, "mismatches": mismatches,
        "error": error})


SAMPLE_PIN = "\n".join([
    pin_line("first_start", 32, 1, -1, 40.0, 7.1, 256 << 21),
    pin_line("after_restart", 32, 1, -1, 12.0, 0.4, 255 << 21),
    pin_line("first_start", 32, 1, 0, 41.0, 7.0, 256 << 21),
    pin_line("first_start", 32, 0, -1, 60.0, 12.0, 256 << 21),
    pin_line("first_start", 32, 0, 0, 61.0, 12.1, 256 << 21),
    "restart_pin_bench: a stray non-JSON line",
    pin_line("first_start", 64, 1, -1, 130.5, 14.2, 512 << 21),
    pin_line("after_restart", 64, 1, -1, 22.5, 0.8, 511 << 21, pause_us=1000, loads=(40, 1.5, 9.0)),
    pin_line("after_restart", 64, 1, -1, 31.0, 0.7, 511 << 21, pause_us=0, loads=(30, 2.0, 2300.0)),
    pin_line("first_start", 64, 1, 0, 90.0, 14.0, 512 << 21),
    pin_line("first_start", 64, 0, -1, 180.0, 25.0, 512 << 21),
    pin_line("first_start", 64, 0, 0, 175.0, 24.0, 512 << 21),
]) + "\n"


def check_sources():
    """The constants above against the sources they come from."""
    def src(path):
        return (ROOT / path).read_text()
    cc, h = src("daemon/restart/state_file.cc"), src("daemon/restart/state_file.h")
    assert f"constexpr uint64_t kPage = {STATE_PAGE};" in cc
    assert f"constexpr uint32_t kRecordFixedBytes = {STATE_RECORD_FIXED};" in cc
    assert f"kDefaultKeyCapacity = {STATE_KEY_BYTES};" in h
    assert f"kMinKeyCapacity = {STATE_KEY_BYTES_MIN};" in h
    assert "RoundUp(kSpecOffset + spec_bytes + fingerprint_bytes, kPage) + kPage" in cc
    assert "EXPECT_EQ(*bytes, 8192u + g.num_rows * 64);" in src("daemon/restart/state_file_test.cc")
    assert "constexpr uint64_t kRowBytes = 2ull << 20;" in src("tests/gpu/restart_pin_bench.cc")
    assert f"uint32_t adopted_pin_pause_us = {DEFAULT_PIN_PAUSE_US};" in src(
        "daemon/region/region.h")
    printed = re.findall(r'Figure\("([a-z_]+)"', src("tests/integration/restart_test.cc"))
    assert sorted(printed) == sorted(TEST_FIGURES), printed
    test = src("tests/integration/restart_test.cc")
    for name in (CLEAN_TEST, CRASH_TEST):
        assert f"TEST(RestartTest, {name.split('.')[1]})" in test, name
    md = src("docs/benchmarks.md")
    assert md.count(BEGIN) == 1 and md.count(END) == 1 and md.index(BEGIN) < md.index(END)
    section = md[md.index("## Restart survival"):]
    assert section.index(BEGIN) < section.index("\n## "), "markers outside '## Restart survival'"


def self_test():
    check_sources()
    figures, results = parse_test_log(SAMPLE_LOG)
    assert figures["ready_rows"] == 2048 and isinstance(figures["ready_rows"], int), figures
    assert figures["crash_committed_restored_rate"] == 0.995, figures
    assert sorted(figures) == sorted(TEST_FIGURES), figures
    assert results == {CLEAN_TEST: "OK", "RestartTest.UpgradeToASecondBinaryKeepsTheRows": "OK",
                       CRASH_TEST: "OK", "RestartTest.DroppedEngineLeavesTheStore": "FAILED"}, \
        results
    pins = parse_pin(SAMPLE_PIN)
    assert len(pins) == 11, pins

    r = build(figures, results, pins)
    for k in ("ready_rows", "clean_restart_hit_rate", "crash_points", "crash_rows_served_wrong",
              "crash_committed_restored_rate", "first_row_usable_ms", "region_gib",
              "fully_pinned_s", "durable_overhead_pct"):
        assert k in r, k
    assert r["ready_rows"] == 2048 and r["crash_points"] == 40, r
    assert r["crash_rows_served_wrong"] == 0 and r["clean_restart_hit_rate"] == 1.0, r
    assert r["region_gib"] == 64, r
    # THP on, unbound: 130.5 (not the node-0 run's 90.0, nor THP off)
    assert r["first_row_usable_ms"] == {"first_start": 130.5, "after_restart": 22.5}, r
    assert r["fully_pinned_s"] == {"first_start": 14.2, "after_restart": 0.8}, r
    assert r["pin_selected"] == {"first_start": 5, "after_restart": 6}, r
    assert r["pin_mismatches"] == 0 and r["pin_runs"] == pins, r
    assert r["pin_after_restart_bytes_verified"] == (255 + 511 + 511) << 21, r
    # the default pause's run, not the slower pause-0 one
    assert r["load_while_pinning_max_ms"] == {"first_start": None, "after_restart": 9.0}, r
    assert r["pin_bytes_verified"] == (255 + 511 + 511 + 8 * 256 + 4 * 256) << 21, r
    # 64 GiB of 2 MiB rows: (8192 + 32768 × 64) / 2^36
    assert r["durable_overhead_pct"] == round(100 * (8192 + 32768 * 64) / (1 << 36), 4) == 0.0031
    by = r["durable_overhead_pct_by_row_bytes"]
    assert by == {"4096": 1.5625, "13312": 0.4808, "65536": 0.0977, "2097152": 0.0031}, by
    assert r["durable_overhead_pct_by_row_bytes_key8"]["4096"] == 0.7813, r
    assert r["durable_target_min_row_bytes"] == {"40": 12800, "8": 6400}, r
    v = r["verdicts"]
    assert v["first_row_usable_ms.first_start"] == "missed by 30.5 ms (1.30× the target)", v
    assert v["first_row_usable_ms.after_restart"] == "met (77.5 ms under)", v
    assert v["clean_restart_hit_rate"] == "met" and v["crash_rows_served_wrong"] == "met", v
    assert v["crash_committed_restored_rate"] == "met (0.5 points over)", v
    assert v["durable_overhead_pct"] == "met (0.4969 points under)", v

    # Only 32 GiB ran; a -1 first row; a mismatch; a failed clean test; a poor restore rate.
    log = SAMPLE_LOG.replace("restored_rate=0.995", "restored_rate=0.981").replace(
        f"[       OK ] {CLEAN_TEST}", f"[  FAILED  ] {CLEAN_TEST}")
    f2, res2 = parse_test_log(log)
    small = parse_pin("\n".join([pin_line("first_start", 32, 1, -1, -1.0, 7.0, 1 << 21, 1),
                                 pin_line("after_restart", 32, 1, -1, 12.0, 0.4)]))
    r2 = build(f2, res2, small)
    v2 = r2["verdicts"]
    assert r2["region_gib"] == 32 and r2["first_row_usable_ms"]["first_start"] is None, r2
    assert v2["first_row_usable_ms.first_start"].startswith("missed (no row usable"), v2
    assert v2["first_row_usable_ms.after_restart"].startswith("not judged: no 64 GiB run"), v2
    assert v2["clean_restart_hit_rate"] == "missed (the test FAILED)", v2
    assert v2["crash_committed_restored_rate"] == "missed by 0.9 points", v2
    assert r2["pin_mismatches"] == 1 and "| 0 mismatches | missed |" in render(r2, {
        "commit": "c", "date": "d", "device": "x"}), r2

    # Not run: the H200 figures null, the markdown says so; the overhead still computed.
    r3 = build(figures, results, [])
    assert r3["region_gib"] is None and r3["first_row_usable_ms"] == {
        "first_start": None, "after_restart": None} and r3["fully_pinned_s"] == {
        "first_start": None, "after_restart": None}, r3
    assert r3["durable_overhead_pct"] == 0.0031 and r3["pin_runs"] == [], r3
    assert r3["verdicts"]["first_row_usable_ms.first_start"] == "not run", r3

    # Writing, on copies: other keys kept, only the marked block replaced, twice the same.
    with tempfile.TemporaryDirectory() as tmp:
        docs = pathlib.Path(tmp)
        (docs / "benchmarks.json").write_text(json.dumps({"ttft": [1], "restart": "old"}))
        md = ("# Benchmarks\n\n## Restart survival\n\nprose\n\n" + BEGIN + "\nold table\n" + END
              + "\n\n## Shared pool\n\nmore\n")
        (docs / "benchmarks.md").write_text(md)
        run = {"commit": "abc1234", "date": "2026-12-02", "device": "NVIDIA H200, 570.1, 0:1",
               "generator": "tests/bench/restart_report.py"}
        block = write(docs, r, run)
        first = (docs / "benchmarks.md").read_text()
        j = json.loads((docs / "benchmarks.json").read_text())
        assert j["ttft"] == [1] and j["restart_run"] == run, j
        assert json.loads(json.dumps(r)) == j["restart"], "JSON round trip"
        assert "old table" not in first and first.startswith("# Benchmarks\n\n## Restart survival"
                                                             "\n\nprose\n\n" + BEGIN + "\n")
        assert first.endswith(END + "\n\n## Shared pool\n\nmore\n"), first
        assert "| 130.5 |" in block and "NVIDIA H200" in block, block
        assert block.count("\n| first_start |") == 8 and block.count("\n| after_restart |") == 3
        assert "FAILED: RestartTest.DroppedEngineLeavesTheStore" in block, block
        assert "missed by 30.5 ms" in block and "met from 12,800 B rows" in block, block
        assert "after a restart 2554 MiB loaded back through the backend, 0 mismatches; at first " \
               "start 6 GiB stored" in block, block
        assert "missed at 4 KiB rows by 1.06 points (0.28 with 8-byte keys)" in block, block
        write(docs, r, run)
        assert (docs / "benchmarks.md").read_text() == first, "not idempotent"
        write(docs, r3, dict(run, device=None))
        assert "restart_pin`: not run at this commit" in (docs / "benchmarks.md").read_text()
        # main() end to end, on the copies
        (docs / "test.log").write_text(SAMPLE_LOG)
        (docs / "restart.jsonl").write_text(SAMPLE_PIN)
        (docs / "device.txt").write_text("NVIDIA H200, 570.1, 00000000:01:00.0\n")
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["--restart_test_log", str(docs / "test.log"), "--restart_pin",
                         str(docs / "restart.jsonl"), "--commit", "abc1234", "--date",
                         "2026-12-02", "--docs", str(docs)]) == 0
        j = json.loads((docs / "benchmarks.json").read_text())
        assert j["restart"] == r and j["restart_run"]["device"].startswith("NVIDIA H200, 570.1")
        assert j["restart_run"]["restart_pin"] == "restart.jsonl" and j["ttft"] == [1], j
    print("self test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
