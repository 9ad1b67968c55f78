#!/usr/bin/env bash
# bazel test //python:host_backend_test — the package's unittests against the real kvoffloadd
# (host backend), with the library and the daemon from runfiles.
set -euo pipefail
root="${TEST_SRCDIR:?run under bazel test}/kvoffload"
export PYTHONPATH="$root/python"
export KVOFFLOAD_LIB="$root/client/libkvoffload_c.so"
export KVOFFLOAD_DAEMON="$root/daemon/kvoffloadd"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" "$root/python/tests/run_tests.py" -v
