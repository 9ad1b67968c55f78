#!/usr/bin/env bash
# Quick start on a fresh machine: installs what is missing, builds, starts kvoffloadd on an
# embedded default (host backend when there is no GPU, a 256 MiB node cap, a temporary runtime
# directory), runs the demo against it, prints the daemon's stats, and stops it.
#   deploy/quickstart.sh            # then exits, leaving nothing running
#   deploy/quickstart.sh --keep     # leaves the daemon running and prints how to reach it
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
[[ ${1:-} == --keep ]] && keep=1
deploy/install_deps.sh
bazel build //daemon:kvoffloadd //client/ctl:kvoffloadctl //client/demo:kvoffload_demo \
  //client/host:kvoffload_host_worker

runtime_dir=$(mktemp -d /tmp/kvoffload-quickstart-XXXXXX)
bin=bazel-bin
"$bin/daemon/kvoffloadd" --runtime_dir="$runtime_dir" --backend=auto --max_region_bytes=256MiB \
  --metrics_address=127.0.0.1:0 --idle_engine_ttl_s=0 --log_level=info \
  2> "$runtime_dir/kvoffloadd.log" &
daemon_pid=$!
cleanup() {
  if [[ $keep -eq 0 ]]; then
    kill -TERM "$daemon_pid" 2>/dev/null && wait "$daemon_pid" || true
    rm -rf "$runtime_dir"
  fi
}
trap cleanup EXIT
for _ in $(seq 100); do
  [[ -S $runtime_dir/admin.sock ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$runtime_dir/kvoffloadd.log"; exit 1; }
  sleep 0.1
done
echo "== kvoffloadd is serving $runtime_dir (log: $runtime_dir/kvoffloadd.log)"
"$bin/client/ctl/kvoffloadctl" --runtime_dir="$runtime_dir" health
echo "== demo"
"$bin/client/demo/kvoffload_demo" --runtime_dir="$runtime_dir"
echo "== kvoffloadctl stats"
"$bin/client/ctl/kvoffloadctl" --runtime_dir="$runtime_dir" stats
echo "== kvoffloadctl plan (TP8 over two nodes of four, rank 5, 80 GiB per node)"
"$bin/client/ctl/kvoffloadctl" plan --world_size=8 --local_world_size=4 --mp_rank=5 \
  --num_layers=32 --page_bytes=65536 --budget_bytes=80GiB
if [[ $keep -eq 1 ]]; then
  echo "kvoffloadd keeps running (pid $daemon_pid): bazel-bin/client/ctl/kvoffloadctl --runtime_dir=$runtime_dir stats"
fi
