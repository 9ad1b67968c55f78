#!/usr/bin/env bash
# Bundles another commit's daemon, C library and Python package beside bundle/gpu, for an A/B of
# the 1-block Python latency in one session on the accelerator machine (latency_ab.sh):
#   tests/bench/gpu/make_ab_bundle.sh COMMIT     # -> bundle/ab-COMMIT (needs bundle/gpu's libraries)
# Builds COMMIT in a worktree under /tmp (its own Bazel output base: a cold build the first time).
set -euo pipefail
cd "$(dirname "$0")/../../.."
commit=$(git rev-parse --short "${1:?usage: make_ab_bundle.sh COMMIT}")
tree=/tmp/kvo-ab-$commit
[[ -d $tree ]] || git worktree add -f "$tree" "$commit" >/dev/null
(cd "$tree" && bazel build --disk_cache=${KVO_DISK_CACHE:-/root/.cache/kvo-disk} \
  //daemon:kvoffloadd //client:libkvoffload_c.so)
out=bundle/ab-$commit
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib" "$out/python"
cp -L "$tree/bazel-bin/daemon/kvoffloadd" "$out/bin/"
cp -L "$tree/bazel-bin/client/libkvoffload_c.so" "$out/lib/"
cp -r "$tree/python/kvoffload" "$out/python/"
# Older commits kept the benchmark under tests/gpu_e2e/.
cp "$(ls "$tree/tests/bench/gpu/torch_bench.py" "$tree/tests/gpu_e2e/torch_bench.py" 2>/dev/null | head -1)" "$out/"
chmod -R u+w "$out" && strip --strip-debug "$out/bin/kvoffloadd" "$out/lib/libkvoffload_c.so"
echo "$commit" > "$out/COMMIT"
du -sh "$out"
