#!/usr/bin/env bash
# The disk tier end to end (tests/bench/tier_e2e_bench.cc): the real kvoffloadd (host backend)
# with --disk_tier_path, against the device's O_DIRECT ceiling measured in the same run (fio when
# on PATH, always also a built-in O_DIRECT reader/writer). Writes OUT/tier_e2e.jsonl (one JSON
# object a line), OUT/disk.txt (what the directory tested sits on) and OUT/machine.txt.
#
#   tests/bench/run_tier_e2e_bench.sh OUT                      # here: builds, runs from bazel-bin
#   BIN_ROOT=/tmp/tree tests/bench/run_tier_e2e_bench.sh OUT   # prebuilt: BIN_ROOT holds
#       daemon/kvoffloadd and tests/bench/tier_e2e_bench (tests/gpu_e2e/run_on_device.sh disk_tier)
#
# KVO_TIER_DIR: the directory on the device to test (default: the first of /var/tmp, $HOME, /tmp
# where O_DIRECT works). KVO_TIER_SIZES: "row_bytes:rows ..." (default "2097152:1024
# 262144:4096": 2 GiB of 2 MiB rows = a 16k-token Llama-3-8B prefix, 1 GiB of 256 KiB rows).
# KVO_TIER_TRACE_REQUESTS: requests per trace (default 3000).
set -uo pipefail
out=$(mkdir -p "${1:-/tmp/kvo_tier_e2e}" && readlink -f "${1:-/tmp/kvo_tier_e2e}")
here=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -z ${BIN_ROOT:-} ]]; then
  (cd "$here" && bazel build --disk_cache=${KVO_DISK_CACHE:-/work/.kvo-disk-cache} \
      //tests/bench:tier_e2e_bench) || exit 1
  BIN_ROOT=$here/bazel-bin
fi
direct_ok() {  # dir: O_DIRECT writes work there (not tmpfs)
  mkdir -p "$1/kvo-tier-e2e" 2>/dev/null &&
    dd if=/dev/zero of="$1/kvo-tier-e2e/probe" bs=1M count=4 oflag=direct status=none 2>/dev/null
  local ok=$?
  rm -f "$1/kvo-tier-e2e/probe"
  return $ok
}
dir=${KVO_TIER_DIR:-}
if [[ -z $dir ]]; then
  for d in /var/tmp "${HOME:-/root}" /tmp; do
    if direct_ok "$d"; then dir=$d/kvo-tier-e2e; break; fi
  done
fi
[[ -n $dir ]] || { echo "no directory with O_DIRECT found; set KVO_TIER_DIR"; exit 1; }
mkdir -p "$dir"
{
  echo "dir: $dir"
  df -hT "$dir"
  src=$(findmnt -no SOURCE --target "$dir" 2>/dev/null)
  echo "source: $src"
  lsblk -o NAME,MODEL,SIZE,ROTA,TYPE,MOUNTPOINT 2>/dev/null
  dev=$(basename "$(readlink -f "$src" 2>/dev/null)" 2>/dev/null)
  for f in queue/rotational queue/logical_block_size queue/write_cache device/model; do
    [[ -r /sys/block/$dev/$f ]] && echo "$dev $f: $(cat /sys/block/$dev/$f)"
  done
  command -v fio >/dev/null && echo "fio: $(fio --version)" || echo "fio: absent (built-in ceiling only)"
} > "$out/disk.txt" 2>&1
{ date -u +%FT%TZ; uname -a; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
  cat /proc/loadavg; } > "$out/machine.txt"
cat "$out/disk.txt"
: > "$out/tier_e2e.jsonl"
failed=0
cd "$BIN_ROOT" || exit 1
for size in ${KVO_TIER_SIZES:-2097152:1024 262144:4096}; do
  echo "=== bandwidth, row ${size%%:*} bytes, ${size##*:} rows"
  timeout 500 tests/bench/tier_e2e_bench --mode=bandwidth --dir="$dir" --row_bytes="${size%%:*}" \
    --rows="${size##*:}" </dev/null >>"$out/tier_e2e.jsonl" 2>>"$out/tier_e2e.err" || failed=1
done
requests=${KVO_TIER_TRACE_REQUESTS:-3000}
echo "=== trace chat (system prompts + conversations)"
timeout 500 tests/bench/tier_e2e_bench --mode=trace --dir="$dir" --trace_name=chat \
  --trace_requests="$requests" </dev/null >>"$out/tier_e2e.jsonl" 2>>"$out/tier_e2e.err" || failed=1
echo "=== trace conversations (no shared system prompt)"
timeout 500 tests/bench/tier_e2e_bench --mode=trace --dir="$dir" --trace_name=conversations \
  --trace_sys_prompts=0 --trace_conv_blocks=32 --trace_requests="$requests" </dev/null \
  >>"$out/tier_e2e.jsonl" 2>>"$out/tier_e2e.err" || failed=1
rm -rf "$dir"
cat "$out/tier_e2e.jsonl"
[[ $failed == 0 ]] || { echo "FAILED: see $out/tier_e2e.err"; tail -5 "$out/tier_e2e.err"; }
exit $failed
