#!/usr/bin/env bash
# Cluster tier benchmark: cluster_tier_bench (a local 3+3 Redis Cluster, redis-benchmark's SET
# and GET rate at the row size, then the tier's write/read GB/s and the promotion of a 16k-token
# prefix) for a few tier settings. One JSON line per run into $1 (default
# /tmp/cluster_tier_bench.jsonl). Needs redis-server and redis-tools (deploy/install_deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/cluster_tier_bench.jsonl}
row=${KVOFFLOAD_CLUSTER_BENCH_ROW_BYTES:-2097152}
bazel build ${KVOFFLOAD_BAZEL_FLAGS:-} //tests/bench:cluster_tier_bench
bin=bazel-bin/tests/bench/cluster_tier_bench
: > "$out"
# threads:connections_per_node:max_value_bytes:prefix_rows (the first run also promotes the
# 16k-token prefix: 1024 rows of 2 MiB).
for run in ${KVOFFLOAD_CLUSTER_BENCH_RUNS:-4:4:8388608:1024 1:1:8388608:0 8:8:8388608:0 4:4:528384:0}; do
  IFS=: read -r threads conns max_value prefix <<< "$run"
  "$bin" --row_bytes="$row" --threads="$threads" --connections_per_node="$conns" \
    --max_value_bytes="$max_value" --prefix_rows="$prefix" 2>/dev/null >> "$out"
done
cat "$out"
