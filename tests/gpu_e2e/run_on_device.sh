#!/usr/bin/env bash
# Runs every GPU test and the benchmark on the accelerator machine, from a bundle built here:
#   tests/gpu_e2e/make_bundle.sh            # builds and bundles into bundle/gpu (git-ignored)
#   (device) tests/gpu_e2e/run_on_device.sh bundle/gpu "$OUT" [tests|bench|all]
# Builds nothing. Writes logs, bench.jsonl (copy baselines), e2e.jsonl (kvoffload end to end, default
# flags), e2e_sms4.jsonl (the same with --copy_sms=4), torch.jsonl (against PyTorch alone, Python
# latency, interference, CPU per job), ttft.jsonl (the TTFT table: ttft_bench.py) and device.txt
# to OUT, prints a short table and a final "N passed, N failed" line. The third argument picks
# stages (quoted, space separated): tests mps_rule ttft baselines e2e e2e_sms4 latency torch mps,
# or all (the default); and, not in all, the copy-path v3 benchmark (v3_bench.py): v3
# (interference without MPS, throughput, CPU per job, 1-block latency from C++ and Python into
# OUT/v3/*.jsonl), v3_mps (interference with every process an MPS client), v3_layout (what layout
# buys at small pages) and v3_reorder (the worker-side reorder: kvoffload.StagedWorker, driven by
# v3_reorder.py); restart_pin (durable regions, serve while pinning: restart_pin_bench, 32 and
# 64 GiB regions, into OUT/restart.jsonl; needs
# up to 128 GiB of host memory); fixed_cost (the copy-engine path's fixed cost per job,
# fixed_cost.py: a per-step breakdown of 512 MiB cross-layer and 1-block jobs for several batch
# variants of the daemon, into OUT/fixed_cost/fixed_cost.json, ~60 s); batch_cpu (the host CPU
# of cudaMemcpyBatchAsync against cudaMemcpyAsync with large entries: batch_cpu_probe, into
# OUT/batch_cpu.jsonl, ~30 s); multi_issue (small random pages issued by 1-8 threads on 1-8
# streams: multi_issue_probe, into OUT/multi_issue.jsonl, ~60 s); v3_cpu (v3's daemon CPU per job
# alone, into OUT/v3/cpu.jsonl); v3_2d (the copy engines'
# 2D copies against a DMA per page, --cuda_2d_min_blocks=0: interference, throughput and layout
# of v3_bench.py with --paths=default,page_dma, into OUT/v3/*_2d.jsonl); disk_tier (the disk tier
# end to end on this node's local disk: tests/bench/run_tier_e2e_bench.sh with the bundle's
# tier_e2e_bench and kvoffloadd, host backend, into OUT/disk_tier/; ~3-5 min); ttft_disk (the TTFT
# table with its 'from disk' column: ttft_bench.py --disk_tier_dir, into OUT/ttft_disk.jsonl).
# KVO_TIER_DIR: the directory on the local disk (default: the first of /var/tmp, $HOME, /tmp
# where O_DIRECT works).
set -uo pipefail
bundle=$(readlink -f "${1:-bundle/gpu}")
out=$(readlink -f "${2:-${OUT:-/tmp/kvo_gpu}}")
stages=" ${3:-all} "  # any of: tests mps_rule ttft baselines e2e e2e_sms4 latency torch mps, all,
                      # v3 v3_mps v3_layout v3_reorder v3_2d restart_pin fixed_cost batch_cpu
                      # multi_issue v3_cpu
want() { [[ $stages == *" all "* || $stages == *" $1 "* ]]; }
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader > "$out/device.txt" 2>&1
echo "device: $(cat "$out/device.txt")"

# The e2e test finds binaries at workspace-relative paths, as in Bazel's runfiles.
tree=$(mktemp -d /tmp/kvo-tree-XXXXXX)
mkdir -p "$tree/daemon" "$tree/client/host" "$tree/tests/gpu_e2e"
ln -s "$bundle/bin/kvoffloadd" "$tree/daemon/kvoffloadd"
ln -s "$bundle/bin/kvoffload_host_worker" "$tree/client/host/kvoffload_host_worker"
ln -s "$bundle/bin/kvoffload_cuda_worker" "$tree/tests/gpu_e2e/kvoffload_cuda_worker"
if [[ -x $bundle/bin/tier_e2e_bench ]]; then
  mkdir -p "$tree/tests/bench"
  ln -s "$bundle/bin/tier_e2e_bench" "$tree/tests/bench/tier_e2e_bench"
fi
# A directory on the local disk where O_DIRECT works (not tmpfs), for the disk-tier stages.
tier_dir() {
  if [[ -n ${KVO_TIER_DIR:-} ]]; then echo "$KVO_TIER_DIR"; return; fi
  local d
  for d in /var/tmp "${HOME:-/root}" /tmp; do
    if mkdir -p "$d/kvo-tier-probe" 2>/dev/null && dd if=/dev/zero of="$d/kvo-tier-probe/p" bs=1M \
         count=4 oflag=direct status=none 2>/dev/null; then
      rm -rf "$d/kvo-tier-probe"; echo "$d/kvo-tier"; return
    fi
    rm -rf "$d/kvo-tier-probe"
  done
}

passed=0
failed=0
run() {  # name timeout command...
  local name=$1 limit=$2
  shift 2
  echo "=== $name"
  if (cd "$tree" && timeout "$limit" "$@") >"$out/$name.log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $name (exit $?), tail of $out/$name.log:"
    tail -15 "$out/$name.log"
  fi
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[       OK \]' "$out/$name.log" | head -40
}

# An MPS control daemon for this run's processes (pipe and logs under OUT), and its end.
mps_start() {
  # Pipe and log outside OUT: what comes back from the machine is a few files, not sockets.
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/kvo-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/kvo-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && sleep 1
}
mps_stop() {
  echo quit | nvidia-cuda-mps-control 2>/dev/null
  sleep 1
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}
bench() {  # name limit command [args]: a benchmark, JSON lines to name.jsonl, stderr to name.err
  local name=$1 limit=$2
  shift 2
  if timeout "$limit" "$@" >"$out/$name.jsonl" 2>"$out/$name.err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: $name ($*)"; tail -15 "$out/$name.err"
  fi
  cat "$out/$name.jsonl"
}
bench_py() {  # name limit script [args]: a benchmark through the Python package
  local name=$1 limit=$2
  shift 2
  bench "$name" "$limit" env PYTHONPATH="$bundle/python" KVOFFLOAD_LIB="$bundle/lib/libkvoffload_c.so" \
    KVOFFLOAD_DAEMON="$bundle/bin/kvoffloadd" python3 "$@"
}

# Stages outside "all": asked for by name only.
only() { [[ $stages == *" $1 "* ]]; }

if want tests; then
run cuda_client_test 60 "$bundle/bin/cuda_client_test"
run cuda_copy_backend_test 60 "$bundle/bin/cuda_copy_backend_test"
# No MPS server here: the driver must say so, and the daemon must keep to copy engines.
run cuda_copy_backend_gpu_test 240 env KVO_EXPECT_MPS=0 "$bundle/bin/cuda_copy_backend_gpu_test"
run e2e_gpu_test 420 "$bundle/bin/e2e_gpu_test"
run python_torch_gpu 240 env PYTHONPATH="$bundle/python" KVOFFLOAD_LIB="$bundle/lib/libkvoffload_c.so" \
  KVOFFLOAD_DAEMON="$bundle/bin/kvoffloadd" python3 "$bundle/python/tests/gpu_smoke.py"
# Pools: two engines in two processes share one pool; one stores, the other loads
# into other blocks, bitwise.
run python_pool_gpu 180 env PYTHONPATH="$bundle/python" KVOFFLOAD_LIB="$bundle/lib/libkvoffload_c.so" \
  KVOFFLOAD_DAEMON="$bundle/bin/kvoffloadd" python3 "$bundle/python/tests/gpu_pool.py"
# kvoffload.StagedWorker (copy path v3's worker-side reorder): its rows are a plain worker's, bitwise.
run python_staged_gpu 180 env PYTHONPATH="$bundle/python:$bundle/python/tests" \
  KVOFFLOAD_LIB="$bundle/lib/libkvoffload_c.so" KVOFFLOAD_DAEMON="$bundle/bin/kvoffloadd" \
  python3 "$bundle/python/tests/gpu_staged.py"
# kvoffload.vllm on the CUDA backend, both supported vLLM generations (their doubles).
run python_vllm_gpu 300 env PYTHONPATH="$bundle/python" KVOFFLOAD_LIB="$bundle/lib/libkvoffload_c.so" \
  KVOFFLOAD_DAEMON="$bundle/bin/kvoffloadd" python3 "$bundle/python/tests/test_vllm_gpu.py"

fi
if want mps_rule; then
  # The SM-path rule under a running MPS server: cudaDevAttrMpsEnabled must report it, and the
  # default (if_mps) must then enable the SM paths. The server is stopped again afterwards.
  echo "=== SM-path rule under MPS"
  if mps_start; then
    run sm_paths_under_mps 60 env KVO_EXPECT_MPS=1 "$bundle/bin/cuda_copy_backend_gpu_test" \
      --gtest_filter='*SmPathsOnlyWithMpsOrTheOperatorsWord*'
  else
    failed=$((failed + 1)); echo "FAILED: nvidia-cuda-mps-control did not start"
  fi
  mps_stop
fi
if want ttft; then
echo "=== TTFT: recompute against loading the prefix's KV"
bench_py ttft 400 "$bundle/ttft_bench.py"
fi
if want baselines; then
echo "=== copy baselines (same run)"
if timeout 250 "$bundle/bin/gpu_baselines" >"$out/bench.jsonl" 2>"$out/bench.err"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: gpu_baselines"; tail -5 "$out/bench.err"
fi
fi
if want e2e; then
echo "=== kvoffload end to end"
if (cd "$tree" && timeout 400 "$bundle/bin/e2e_bench" --daemon=daemon/kvoffloadd \
      --worker=tests/gpu_e2e/kvoffload_cuda_worker) >"$out/e2e.jsonl" 2>"$out/e2e.err"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: e2e_bench"; tail -5 "$out/e2e.err"
fi
cat "$out/e2e.jsonl"
fi
if want e2e_sms4; then
echo "=== kvoffload end to end, --copy_sms=4"
if (cd "$tree" && timeout 400 "$bundle/bin/e2e_bench" --daemon=daemon/kvoffloadd \
      --worker=tests/gpu_e2e/kvoffload_cuda_worker --daemon_args=--copy_sms=4) \
      >"$out/e2e_sms4.jsonl" 2>"$out/e2e_sms4.err"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: e2e_bench (--copy_sms=4)"; tail -5 "$out/e2e_sms4.err"
fi
grep -E '"store"|interference' "$out/e2e_sms4.jsonl"
fi
if want latency; then
echo "=== 1-block job latency from Python (C ABI wait, no polling)"
bench_py latency 120 "$bundle/torch_bench.py" --latency
fi
if want torch; then
echo "=== against PyTorch alone (Python package)"
bench_py torch 500 "$bundle/torch_bench.py"
fi
if want mps; then
  # The same end-to-end and PyTorch benchmarks with every process an MPS client (kernels of the
  # daemon and of the model then share SMs instead of time-slicing the GPU). Experimental: only
  # if nvidia-cuda-mps-control starts here; it is stopped again afterwards.
  echo "=== under MPS"
  if mps_start; then
    (cd "$tree" && timeout 400 "$bundle/bin/e2e_bench" --daemon=daemon/kvoffloadd \
        --worker=tests/gpu_e2e/kvoffload_cuda_worker) >"$out/e2e_mps.jsonl" 2>"$out/e2e_mps.err" \
      && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: e2e_bench under MPS"; tail -5 "$out/e2e_mps.err"; }
    grep -E 'interference|latency|"llama' "$out/e2e_mps.jsonl"
    timeout 500 env PYTHONPATH="$bundle/python" KVOFFLOAD_LIB="$bundle/lib/libkvoffload_c.so" \
        KVOFFLOAD_DAEMON="$bundle/bin/kvoffloadd" python3 "$bundle/torch_bench.py" \
        >"$out/torch_mps.jsonl" 2>"$out/torch_mps.err" \
      && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAILED: torch_bench under MPS"; tail -5 "$out/torch_mps.err"; }
    cat "$out/torch_mps.jsonl"
  else
    echo "SKIPPED: nvidia-cuda-mps-control did not start"
  fi
  mps_stop
fi
if only v3 || only v3_mps || only v3_layout || only v3_reorder || only v3_2d || only v3_cpu; then
  mkdir -p "$out/v3"
  git_commit=$(cat "$bundle/COMMIT" 2>/dev/null || echo unknown)
  echo "{\"commit\":\"$git_commit\",\"device\":\"$(cat "$out/device.txt")\",\"date\":\"$(date -u +%F)\"}" \
    > "$out/v3/run.json"
fi
if only v3; then
  echo "=== copy path v3: interference without MPS (model in CUDA graphs, copiers in their own processes)"
  bench_py v3/interference 200 "$bundle/v3_bench.py" interference
  echo "=== copy path v3: throughput, one and two jobs in flight"
  bench_py v3/throughput 150 "$bundle/v3_bench.py" throughput
  echo "=== copy path v3: daemon CPU per job"
  bench_py v3/cpu 100 "$bundle/v3_bench.py" cpu
  echo "=== copy path v3: 1-block latency, Python and C++"
  bench_py v3/latency_python 60 "$bundle/torch_bench.py" --latency
  if (cd "$tree" && timeout 60 "$bundle/bin/e2e_bench" --daemon=daemon/kvoffloadd \
        --worker=tests/gpu_e2e/kvoffload_cuda_worker --latency_only) \
        >"$out/v3/latency_cpp.jsonl" 2>"$out/v3/latency_cpp.err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: e2e_bench --latency_only"; tail -5 "$out/v3/latency_cpp.err"
  fi
  cat "$out/v3/latency_cpp.jsonl"
fi
if only v3_cpu; then
  echo "=== copy path v3: daemon CPU per job (alone)"
  bench_py v3/cpu 100 "$bundle/v3_bench.py" cpu
fi
if only v3_2d; then
  echo "=== copy engines: 2D copies (default) against a DMA per page (page_dma)"
  bench_py v3/interference_2d 200 "$bundle/v3_bench.py" interference --paths=default,page_dma
  bench_py v3/throughput_2d 200 "$bundle/v3_bench.py" throughput --paths=default,page_dma
  bench_py v3/layout_2d 200 "$bundle/v3_bench.py" layout --paths=default,page_dma
fi
if only v3_layout; then
  echo "=== copy path v3: what layout buys at small pages"
  bench_py v3/layout 120 "$bundle/v3_bench.py" layout
fi
if only v3_reorder; then
  echo "=== copy path v3: worker-side reorder (kvoffload.StagedWorker), rate and cost to the model in its process"
  bench_py v3/reorder 150 "$bundle/v3_bench.py" reorder
fi
if only fixed_cost; then
  echo "=== copy-engine path: fixed cost per job, per-step medians per daemon variant"
  mkdir -p "$out/fixed_cost"
  if timeout -k 5 120 env PYTHONPATH="$bundle/python" KVOFFLOAD_LIB="$bundle/lib/libkvoffload_c.so" \
      KVOFFLOAD_DAEMON="$bundle/bin/kvoffloadd" python3 "$bundle/fixed_cost.py" \
      "$out/fixed_cost/fixed_cost.json" >"$out/fixed_cost/table.txt" 2>"$out/fixed_cost/err.txt"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: fixed_cost"; tail -15 "$out/fixed_cost/err.txt"
  fi
  cat "$out/fixed_cost/table.txt"
fi
if only batch_cpu; then
  echo "=== host CPU of cudaMemcpyBatchAsync against cudaMemcpyAsync, large entries"
  bench batch_cpu 120 "$bundle/bin/batch_cpu_probe"
fi
if only multi_issue; then
  echo "=== small random pages issued by more threads on more streams"
  bench multi_issue 150 "$bundle/bin/multi_issue_probe"
fi
if only restart_pin; then
  echo "=== restart benchmark: time to first load and to fully pinned after a restart"
  if [[ ! -x $bundle/bin/restart_pin_bench ]]; then
    failed=$((failed + 1)); echo "FAILED: restart_pin_bench is not in the bundle"
  elif timeout 360 "$bundle/bin/restart_pin_bench" --gib=32,64 --chunk_mib=128 --threads=8 \
      --thp=1,0 >"$out/restart.jsonl" 2>"$out/restart.err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: restart_pin_bench (exit $?)"; tail -5 "$out/restart.err"
  fi
  cat "$out/restart.jsonl" 2>/dev/null
fi
if only v3_mps; then
  echo "=== copy path v3: interference with every process an MPS client"
  if mps_start; then
    bench_py v3/interference_mps 200 "$bundle/v3_bench.py" interference --mps
  else
    failed=$((failed + 1)); echo "FAILED: nvidia-cuda-mps-control did not start"
  fi
  mps_stop
fi
if only disk_tier; then
  echo "=== disk tier end to end (host backend, this node's local disk)"
  if BIN_ROOT="$tree" KVO_TIER_DIR="$(tier_dir)" timeout 580 "$bundle/run_tier_e2e_bench.sh" \
       "$out/disk_tier" > "$out/disk_tier.log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: disk_tier"; tail -15 "$out/disk_tier.log"
  fi
  cat "$out/disk_tier/disk.txt" "$out/disk_tier/tier_e2e.jsonl" 2>/dev/null
fi
if only ttft_disk; then
  echo "=== TTFT with the 'from disk' column"
  d=$(tier_dir)
  bench_py ttft_disk 560 "$bundle/ttft_bench.py" --disk_tier_dir "${d:-/var/tmp/kvo-tier}-ttft"
  rm -rf "${d:-/var/tmp/kvo-tier}-ttft"
fi
rm -rf "$tree"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
