#!/usr/bin/env bash
# The cluster tier end to end (tests/bench/cluster_e2e_bench.cc): real kvoffloadd processes (host
# backend) as nodes sharing a local 3+3 Redis Cluster. Writes OUT/trace.jsonl (the multi-node
# trace with and without the tier), OUT/bandwidth.jsonl (spill/promote GB/s against redis-benchmark
# in the same run, a prefix promoted, a master SIGSTOPped) and OUT/machine.txt.
# Needs redis-server and redis-tools (deploy/install_deps.sh).
#
#   tests/bench/run_cluster_e2e_bench.sh OUT
#
# KVO_CLUSTER_E2E_TRACE_ARGS / KVO_CLUSTER_E2E_BW_ARGS: extra flags for each mode (e.g.
# "--requests=3000", "--prefix_rows=256"). Each mode runs under `timeout` (KVO_CLUSTER_E2E_LIMIT_S,
# default 480 s).
set -uo pipefail
out=$(mkdir -p "${1:-/tmp/kvo_cluster_e2e}" && readlink -f "${1:-/tmp/kvo_cluster_e2e}")
here=$(cd "$(dirname "$0")/../.." && pwd)
(cd "$here" && bazel build --disk_cache=${KVO_DISK_CACHE:-/work/.kvo-disk-cache} \
    //tests/bench:cluster_e2e_bench) || exit 1
runfiles=$here/bazel-bin/tests/bench/cluster_e2e_bench.runfiles/kvoffload
limit=${KVO_CLUSTER_E2E_LIMIT_S:-480}
{ date -u +%FT%TZ; uname -a; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
  redis-server --version; redis-benchmark --version 2>/dev/null || true
  echo "commit: $(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet HEAD -- . ':!runs' || echo '+dirty')"
  echo "loadavg: $(cat /proc/loadavg)"; } > "$out/machine.txt" 2>&1
cd "$runfiles" || exit 1
rc=0
# shellcheck disable=SC2086
timeout "$limit" ./tests/bench/cluster_e2e_bench --mode=trace ${KVO_CLUSTER_E2E_TRACE_ARGS:-} \
  > "$out/trace.jsonl" 2> "$out/trace.stderr" || rc=$?
# shellcheck disable=SC2086
timeout "$limit" ./tests/bench/cluster_e2e_bench --mode=bandwidth ${KVO_CLUSTER_E2E_BW_ARGS:-} \
  > "$out/bandwidth.jsonl" 2> "$out/bandwidth.stderr" || rc=$?
echo "loadavg at the end: $(cat /proc/loadavg)" >> "$out/machine.txt"
cat "$out/trace.jsonl" "$out/bandwidth.jsonl"
exit $rc
