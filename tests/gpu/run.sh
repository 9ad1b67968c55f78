#!/usr/bin/env bash
# Runs the GPU tests and the copy baselines on the accelerator machine from a bundle made here:
#   bazel build //tests/gpu:all //tests/bench/gpu:gpu_baselines //daemon/copy/cuda:cuda_copy_backend_test //client/cuda:cuda_client_test
#   ../shared/tools/device-bundle bundle/gpu bazel-bin/tests/gpu/cuda_copy_backend_gpu_test \
#       bazel-bin/tests/bench/gpu/gpu_baselines bazel-bin/daemon/copy/cuda/cuda_copy_backend_test \
#       bazel-bin/client/cuda/cuda_client_test
#   (device) tests/gpu/run.sh bundle/gpu [OUT_DIR] [--sweep]
# Prints one "N passed, N failed" line at the end; writes logs and bench JSON lines to OUT_DIR.
set -uo pipefail
bundle=${1:-bundle/gpu}
out=${2:-${OUT:-/tmp/kvo_gpu}}
shift $(( $# >= 2 ? 2 : $# ))
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
passed=0
failed=0
for t in cuda_copy_backend_test cuda_client_test cuda_copy_backend_gpu_test; do
  if [[ ! -x $bundle/bin/$t ]]; then echo "missing $bundle/bin/$t"; failed=$((failed + 1)); continue; fi
  echo "=== $t"
  limit=60; [[ $t == cuda_copy_backend_gpu_test ]] && limit=200
  if timeout "$limit" "$bundle/bin/$t" >"$out/$t.log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $t (log: $out/$t.log)"
  fi
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |^gpu tests:|^  (store|load|daemon)' "$out/$t.log" | head -60
done
if [[ -x $bundle/bin/gpu_baselines ]]; then
  echo "=== gpu_baselines"
  if timeout 250 "$bundle/bin/gpu_baselines" "$@" >"$out/bench.jsonl" 2>"$out/bench.err"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: gpu_baselines"; tail -5 "$out/bench.err"
  fi
  sed -n '/^method /,$p' "$out/bench.jsonl"
fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
