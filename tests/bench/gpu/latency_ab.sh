#!/usr/bin/env bash
# The 1-block Python latency (torch_bench.py --latency: store of one block, submit to verdict,
# 2000 jobs) of two builds in one session, interleaved so both see the same machine: on the
# accelerator machine,
#   tests/bench/gpu/latency_ab.sh bundle/gpu bundle/ab-COMMIT OUT [ROUNDS]
# Each round runs the other build then this one, each with its own daemon, C library, Python
# package and torch_bench.py; lines go to OUT/latency_ab.jsonl with "build" = the COMMIT file.
set -uo pipefail
new=$(readlink -f "$1") old=$(readlink -f "$2") out=$(readlink -f "$3") rounds=${4:-3}
mkdir -p "$out"
export LD_LIBRARY_PATH="$new/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # shared system libraries
failed=0
for ((r = 1; r <= rounds; r++)); do
  for b in "$old" "$new"; do
    line=$(timeout 120 env PYTHONPATH="$b/python" KVOFFLOAD_LIB="$b/lib/libkvoffload_c.so" \
      KVOFFLOAD_DAEMON="$b/bin/kvoffloadd" python3 "$b/torch_bench.py" --latency 2>>"$out/latency_ab.err" |
      grep latency_python_us) || { failed=1; echo "FAILED: $(cat "$b/COMMIT") round $r"; }
    echo "{\"build\":\"$(cat "$b/COMMIT")\",\"round\":$r,${line#\{}" | tee -a "$out/latency_ab.jsonl"
  done
done
exit $failed
