#!/usr/bin/env bash
# Builds the GPU tests, the benchmark and the binaries they start, and bundles them (with their
# shared libraries) into bundle/gpu for tests/gpu_e2e/run_on_device.sh on the accelerator machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
# The bundling tool lies beside the main checkout (../shared); a worktree elsewhere names it.
device_bundle=${DEVICE_BUNDLE:-../shared/tools/device-bundle}
[[ -x $device_bundle ]] || device_bundle=/work/shared/tools/device-bundle
# The GPU tests (tests/gpu, tests/gpu_e2e) and the GPU benchmarks (tests/bench/gpu).
bazel build --disk_cache=${KVO_DISK_CACHE:-/root/.cache/kvo-disk} //daemon:kvoffloadd //client/host:kvoffload_host_worker //tests/gpu_e2e:all \
  //tests/gpu:cuda_copy_backend_gpu_test //tests/bench/gpu:all \
  //daemon/copy/cuda:cuda_copy_backend_test //client/cuda:cuda_client_test \
  //tests/bench:tier_e2e_bench
rm -rf bundle/gpu
b=bazel-bin
"$device_bundle" bundle/gpu $b/daemon/kvoffloadd $b/client/host/kvoffload_host_worker \
  $b/tests/gpu_e2e/kvoffload_cuda_worker $b/tests/gpu_e2e/e2e_gpu_test $b/tests/bench/gpu/e2e_bench \
  $b/tests/gpu/cuda_copy_backend_gpu_test $b/tests/bench/gpu/gpu_baselines $b/tests/bench/gpu/batch_cpu_probe \
  $b/tests/bench/gpu/multi_issue_probe $b/tests/gpu/restart_pin_bench \
  $b/daemon/copy/cuda/cuda_copy_backend_test $b/client/cuda/cuda_client_test \
  $b/tests/bench/tier_e2e_bench
bazel build --disk_cache=${KVO_DISK_CACHE:-/root/.cache/kvo-disk} //client:libkvoffload_c.so
cp -L $b/client/libkvoffload_c.so bundle/gpu/lib/
mkdir -p bundle/gpu/python && cp -r python/kvoffload python/tests bundle/gpu/python/
# The device's own (newer) libstdc++/libgcc serve our gcc-12 binaries; a bundled older copy would
# shadow the one torch needs in the Python test. Debug info stays here, in bazel-bin.
rm -f bundle/gpu/lib/libstdc++.so* bundle/gpu/lib/libgcc_s.so*
chmod -R u+w bundle/gpu
strip --strip-debug bundle/gpu/bin/* bundle/gpu/lib/*.so*
cp tests/gpu_e2e/run_on_device.sh tests/bench/gpu/torch_bench.py tests/bench/gpu/ttft_bench.py \
  tests/bench/gpu/v3_bench.py tests/bench/gpu/v3_workloads.py tests/bench/gpu/v3_reorder.py \
  tests/bench/gpu/fixed_cost.py tests/bench/run_tier_e2e_bench.sh bundle/gpu/
# The commit the binaries were built from ("+dirty" when the tree had changes): the run records it.
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bundle' || echo +dirty)" \
  > bundle/gpu/COMMIT
exclude="$(git rev-parse --git-common-dir)/info/exclude"  # .gitignore says it too
mkdir -p "$(dirname "$exclude")"
grep -qsx 'bundle/' "$exclude" || echo 'bundle/' >> "$exclude"
du -sh bundle/gpu
