#!/usr/bin/env bash
# bazel test //python:host_backend_test — the package's unittests against the real kvoffloadd
# (host backend), with the library and the daemon from runfiles.
set -euo pipefail
root="${TEST_SRCDIR:?run under bazel test}/kvoffload"
export PYTHONPATH="$root/python"
export KVOFFLOAD_LIB="$root/client/libkvoffload_c.so"
export KVOFFLOAD_DAEMON="$root/daemon/kvoffloadd"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Debian's interpreter, where deploy/install_deps.sh puts numpy and torch (a python3 earlier on
# PATH, e.g. pyenv's, lacks them and would skip the tests that need them).
python=${PYTHON:-python3}
[[ -n ${PYTHON:-} || ! -x /usr/bin/python3 ]] || python=/usr/bin/python3
exec "$python" "$root/python/tests/run_tests.py" -v
