#!/usr/bin/env bash
# Host-backend benchmarks (no GPU): the control path (submit → finished of a 1-block job over
# gRPC; the daemon's CPU per job for 1 to 1M blocks sent as one range) and the slot index at 1M
# rows. Rewrites the host section of docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //daemon:kvoffloadd //tests/bench:control_path_bench //tests/bench:index_bench
commit=$(git rev-parse --short HEAD)
{
  echo "<!-- host-begin -->"
  echo "Run of commit \`$commit\` on $(date -u +%F), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), host backend."
  echo
  bazel-bin/tests/bench/control_path_bench --daemon=bazel-bin/daemon/kvoffloadd --iterations=5000
  echo
  bazel-bin/tests/bench/index_bench | sed -n '/^|/p;/^SlotIndex/p'
  echo "<!-- host-end -->"
} > /tmp/kvoffload-host-bench.md
python3 - <<'PY'
import pathlib, re
md = pathlib.Path("docs/benchmarks.md")
text = md.read_text() if md.exists() else "# Benchmarks\n"
block = pathlib.Path("/tmp/kvoffload-host-bench.md").read_text().rstrip("\n")
if "<!-- host-begin -->" in text:
    text = re.sub(r"<!-- host-begin -->.*?<!-- host-end -->", lambda _: block, text, flags=re.S)
else:
    text += "\n## Control path and index (host backend, no GPU)\n\n" + block + "\n"
md.write_text(text)
PY
cat /tmp/kvoffload-host-bench.md
