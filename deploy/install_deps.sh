#!/usr/bin/env bash
# Installs the Debian packages kvoffload builds and tests with, when any is missing.
# Used by deploy/quickstart.sh and tests/run_all.sh; safe to run again. clang-14 and its
# runtimes (libclang-rt-14-dev: ASan, UBSan, TSan, libFuzzer) serve run_all.sh's sanitizer,
# thread-safety and fuzzing stages; python3-torch (CPU) the Python tests of kvoffload.StagedWorker;
# liburing-dev, libxxhash-dev and fio the disk tier (daemon/tier) and its benchmark;
# redis-server, redis-tools and libhiredis-dev the cluster tier (daemon/tier/cluster): its client
# library, and the local Redis Cluster its tests and benchmark start.
set -euo pipefail
packages=(
  bazel-bootstrap bazel-rules-java g++ python3
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  prometheus-cpp-dev libsystemd-dev systemd python3-grpcio
  python3-venv python3-setuptools python3-wheel python3-numpy python3-torch
  clang-14 libclang-rt-14-dev
  liburing-dev libxxhash-dev fio
  redis-server redis-tools libhiredis-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install_deps: all ${#packages[@]} packages present"
else
  echo "install_deps: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "install_deps: the CUDA toolkit is expected at /usr/local/cuda (nvcc, headers, libcudart_static.a)" >&2
  exit 1
fi
