#!/usr/bin/env bash
# Disk tier benchmark sweep: disk_tier_bench (fio's O_DIRECT ceiling, then the tier
# at the same block size and queue depth) at several queue depths and both I/O implementations.
# One JSON line per run into $1 (default /tmp/disk_tier_bench.jsonl). The directory tested is
# $KVOFFLOAD_TIER_BENCH_DIR (default /tmp/kvoffload-disk-tier-bench): put it on the NVMe to judge.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/disk_tier_bench.jsonl}
dir=${KVOFFLOAD_TIER_BENCH_DIR:-/tmp/kvoffload-disk-tier-bench}
bytes=${KVOFFLOAD_TIER_BENCH_BYTES:-4294967296}
bazel build //tests/bench:disk_tier_bench
: > "$out"
for qd in ${KVOFFLOAD_TIER_BENCH_QDS:-1 4 16 32 64}; do
  bazel-bin/tests/bench/disk_tier_bench --dir="$dir" --bytes="$bytes" --qd="$qd" --io=uring \
    2>/dev/null >> "$out"
done
bazel-bin/tests/bench/disk_tier_bench --dir="$dir" --bytes="$bytes" --qd=32 --io=pread \
  2>/dev/null >> "$out"
cat "$out"
