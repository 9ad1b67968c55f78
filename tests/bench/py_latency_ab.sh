#!/usr/bin/env bash
# The 1-block Python latency on the host backend (py_latency_host.py) of two builds, interleaved
# on this machine: this tree's bazel-bin against another commit's worktree build
# (tests/bench/gpu/make_ab_bundle.sh COMMIT builds one in /tmp/kvo-ab-COMMIT):
#   tests/bench/py_latency_ab.sh COMMIT [ROUNDS]      # JSON lines, "build" = the commit
set -uo pipefail
cd "$(dirname "$0")/../.."
old=/tmp/kvo-ab-$(git rev-parse --short "${1:?usage: py_latency_ab.sh COMMIT [ROUNDS]}")
rounds=${2:-5}
here=$(git rev-parse --short HEAD)
for ((r = 1; r <= rounds; r++)); do
  for tree in "$old" "$PWD"; do
    build=$([[ $tree == "$PWD" ]] && echo "$here" || git -C "$tree" rev-parse --short HEAD)
    line=$(env PYTHONPATH="$tree/python" KVOFFLOAD_LIB="$tree/bazel-bin/client/libkvoffload_c.so" \
      KVOFFLOAD_DAEMON="$tree/bazel-bin/daemon/kvoffloadd" python3 tests/bench/py_latency_host.py)
    echo "{\"build\":\"$build\",\"round\":$r,${line#\{}"
  done
done
