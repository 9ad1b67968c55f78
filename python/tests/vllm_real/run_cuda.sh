#!/usr/bin/env bash
# The real-source harness with the worker side on CUDA: vLLM's own OffloadingConnector files
# (MANIFEST.tsv) drive kvoffload.vllm against kvoffloadd on its CUDA backend, each TP rank's KV
# cache a CUDA tensor (cross-layer: one [num_blocks, layers, ...] tensor; per_layer: K/V tensors
# per layer), every loaded block compared byte for byte.
#
#   run_cuda.sh VLLM_SOURCE [VLLM_SOURCE...] [-- driver.py args, e.g. --gen v0_20_2 --scenario tp2]
#
# VLLM_SOURCE: anything prepare.sh takes (a copy of /work/vllm-src, a folder prepare.sh made, or
# git mirrors of eigen-hub/vllm and neuralmagic/vllm); the files are checked against MANIFEST.tsv.
# Needs python3 with torch that sees a GPU (no network, no vLLM install). Environment:
#   KVOFFLOAD_DAEMON, KVOFFLOAD_LIB  the binaries (default: this checkout's bazel-bin)
#   PYTHON                           the interpreter (default python3)
# Ends with "N passed, N failed"; exit status 0 only when all passed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
sources=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do sources+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ "${#sources[@]}" -eq 0 ]; then
  sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
fi
py="${PYTHON:-python3}"
dest="$(mktemp -d /tmp/vllm-real-src.XXXXXX)"
trap 'rm -rf "$dest"' EXIT
"$here/prepare.sh" "${sources[@]}" "$dest"
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
export KVOFFLOAD_DAEMON="${KVOFFLOAD_DAEMON:-$repo/bazel-bin/daemon/kvoffloadd}"
export KVOFFLOAD_LIB="${KVOFFLOAD_LIB:-$repo/bazel-bin/client/libkvoffload_c.so}"
export PYTHONUNBUFFERED=1
"$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "run_cuda.sh: torch sees no CUDA device")'
"$py" -c 'import torch; print("torch %s, %d GPU(s): %s" % (torch.__version__, torch.cuda.device_count(), torch.cuda.get_device_name(0)))'
"$py" "$here/driver.py" --src "$dest" --cuda "$@"
