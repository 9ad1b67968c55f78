#!/usr/bin/env bash
# Runs standard_grpc_tools_test.py with Debian's python3 (python3-grpcio) against the built daemon.
set -euo pipefail
root="${TEST_SRCDIR:-.}/kvoffload"
export KVOFFLOADD="$root/daemon/kvoffloadd"
exec /usr/bin/python3 "$root/tests/integration/standard_grpc_tools_test.py"
