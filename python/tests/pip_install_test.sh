#!/usr/bin/env bash
# bazel test //python:pip_install_test — `pip install ./python` into a fresh venv, offline
# (--no-index --no-build-isolation, setuptools and wheel from the system: Debian's
# python3-venv, python3-setuptools, python3-wheel), then import the installed package, load the
# library through KVOFFLOAD_LIB and once from the package directory (copied in, as an installer
# would), and check that nothing is imported from the source tree.
set -euo pipefail
root="${TEST_SRCDIR:?run under bazel test}/kvoffload"
lib="$root/client/libkvoffload_c.so"
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/kvo-pip-XXXXXX")"
trap 'rm -rf "$work"' EXIT

# An interpreter that has venv, setuptools and wheel (Debian's /usr/bin/python3 when present).
python=""
for candidate in "${PYTHON:-}" /usr/bin/python3 python3; do
  [[ -n "$candidate" ]] || continue
  if "$candidate" -c "import venv, ensurepip, setuptools, wheel" 2>/dev/null; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "FAIL: no python3 with venv, ensurepip, setuptools and wheel" \
       "(apt-get install python3-venv python3-setuptools python3-wheel)" >&2
  exit 1
fi
echo "interpreter: $python ($("$python" --version 2>&1))"

# pip builds in the source dir: copy it (runfiles are read-only links).
cp -rL "$root/python" "$work/src"
chmod -R u+w "$work/src"
"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --no-index --no-build-isolation \
    --disable-pip-version-check "$work/src"

cd "$work"  # away from any source tree
check='
import os, sys, kvoffload
site = os.path.dirname(os.path.dirname(kvoffload.__file__))
assert site.startswith(sys.prefix), (kvoffload.__file__, sys.prefix)
print("imported", kvoffload.__file__)
print("version", kvoffload.version(), "from", kvoffload._native.library().kvoffload_path)
spec = kvoffload.EngineSpec(engine_id="pip", page_bytes=4096, budget_bytes=1 << 20)
import kvoffload.vllm
assert kvoffload.vllm.__file__.startswith(sys.prefix), kvoffload.vllm.__file__
print("kvoffload.vllm for vLLM", kvoffload.vllm.PINNED_VLLM_VERSION)
'
env -u PYTHONPATH KVOFFLOAD_LIB="$lib" "$work/venv/bin/python" -c "$check"

# The package directory is the next place looked in.
pkg="$("$work/venv/bin/python" -c 'import kvoffload, os; print(os.path.dirname(kvoffload.__file__))')"
cp "$lib" "$pkg/libkvoffload_c.so"
out="$(env -u PYTHONPATH -u KVOFFLOAD_LIB "$work/venv/bin/python" -c "$check")"
echo "$out"
grep -q "from $pkg/libkvoffload_c.so" <<<"$out"
echo "pip install ./python: ok"
