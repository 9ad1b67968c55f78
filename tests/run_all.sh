#!/usr/bin/env bash
# Builds everything and runs every test that needs no GPU; GPU tests (tag "gpu") are listed as
# skipped. Then the robustness proofs: clang's thread-safety analysis as an error, the daemon's
# unit and integration tests under ASan+UBSan and under TSan, and the service fuzzer for a
# bounded time. Ends with one line "N passed, N failed" (test cases from the JUnit XML of each
# target, in every configuration, plus one per check). Exit status: 0 only when nothing failed.
#
# Environment: KVOFFLOAD_BAZEL_JOBS (default auto), KVOFFLOAD_FUZZ_SECONDS (default 60),
# KVOFFLOAD_SKIP_SANITIZERS=1 to run only the gcc build and tests (quick local runs).
set -uo pipefail
cd "$(dirname "$0")/.."
deploy/install_deps.sh || exit 1

jobs=${KVOFFLOAD_BAZEL_JOBS:-auto}
fuzz_seconds=${KVOFFLOAD_FUZZ_SECONDS:-60}
# The clang configurations re-configure the C++ toolchain (CC), so they get an output base of
# their own and leave the default build's cache alone; no convenience symlinks (they would
# replace bazel-bin and bazel-testlogs of the default build).
clang_base="${KVOFFLOAD_CLANG_OUTPUT_BASE:-$HOME/.cache/kvoffload-clang/$(pwd | md5sum | cut -c1-12)}"
clang_bazel=(bazel "--output_base=$clang_base")
clang_flags=(--jobs="$jobs" --symlink_prefix=/)
# The fuzz corpus replays under ASan only: under TSan, gRPC's in-process channel (which the fuzzer
# uses) hands serialized bytes and metadata between threads without a copy through queues TSan
# cannot see, and those reports cannot be told apart from ours without broad suppressions.
asan_targets=(//daemon/... //tests/integration/... //tests/fuzz/...)
tsan_targets=(//daemon/... //tests/integration/...)

checks_passed=0
checks_failed=0
check() {  # check NAME STATUS
  if [[ $2 -eq 0 ]]; then
    echo "PASSED: $1"; checks_passed=$((checks_passed + 1))
  else
    echo "FAILED: $1"; checks_failed=$((checks_failed + 1))
  fi
}
stage_times=()
stage_start() { stage_name=$1; stage_t0=$SECONDS; echo "== $1"; }
stage_end() { stage_times+=("$stage_name: $((SECONDS - stage_t0)) s"); }

# Test cases in the JUnit XML of the test targets named on stdin (one label a line) under a
# testlogs directory: prints "passed failed targets". A target without XML counts as one failure.
count_cases() {
  python3 -c '
import os, sys, xml.etree.ElementTree as ET
testlogs = sys.argv[1]
passed = failed = targets = 0
for label in sys.stdin.read().split():
    pkg, name = label.lstrip("/").split(":")
    path = os.path.join(testlogs, pkg, name, "test.xml")
    targets += 1
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        failed += 1
        continue
    suites = [root] if root.tag == "testsuite" else root.iter("testsuite")
    for suite in suites:
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed += 1
            elif (case.get("status") != "notrun" and case.get("result") != "skipped"
                  and case.find("skipped") is None):
                passed += 1
print(passed, failed, targets)
' "$1"
}
# For each target a bazel test summary (stdin) reports as FAILED or TIMEOUT, the lines of its
# test.log under the testlogs directory $1 that say why (CI keeps only this output).
show_failures() {
  local label pkg name log
  grep -oE "^//[^ ]+ +(FAILED|TIMEOUT)" | awk '{print $1}' | while read -r label; do
    pkg=${label#//}; name=${pkg#*:}; pkg=${pkg%%:*}
    log="$1/$pkg/$name/test.log"
    echo "---- why $label failed ($log):"
    if [[ -f $log ]]; then
      grep -m1 -A40 -E "WARNING: (ThreadSanitizer|AddressSanitizer|LeakSanitizer)|ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|Failure$|\[  FAILED  \]|Check failed|terminate called" "$log" | \
        cut -c1-240 || tail -40 "$log"
    fi
  done
}
# Test targets without the gpu tag under the given patterns.
test_targets() {
  local expr="tests($(IFS=+; echo "$*"))"
  "${query_bazel[@]}" query "$expr except attr(tags, \"\\bgpu\\b\", $expr)" 2>/dev/null
}

stage_start "build (gcc)"
if ! bazel build --jobs="$jobs" //...; then
  echo "0 passed, 1 failed (build)"
  exit 1
fi
stage_end

stage_start "tests (gcc, no GPU)"
bazel test --jobs="$jobs" --test_tag_filters=-gpu //... 2>&1 | tee /tmp/kvoffload-test-summary.$$ | \
  grep -E "PASSED|FAILED|TIMEOUT|NO STATUS|Executed"
bazel_rc=${PIPESTATUS[0]}
show_failures "$(bazel info bazel-testlogs 2>/dev/null)" < /tmp/kvoffload-test-summary.$$
query_bazel=(bazel)
read -r passed failed targets < <(test_targets //... | count_cases "$(bazel info bazel-testlogs 2>/dev/null)")
if [[ $bazel_rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi  # a target that crashed before XML
echo "gcc: $passed passed, $failed failed in $targets targets"
stage_end

echo "== GPU tests (tag gpu): skipped here, they run on the accelerator machine (tests/gpu_e2e/run_on_device.sh)"
for target in $(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null); do
  echo "SKIPPED (no GPU on this machine): $target"
done

if [[ ${KVOFFLOAD_SKIP_SANITIZERS:-0} != 1 ]]; then
  for config in asan tsan; do
    if [[ $config == asan ]]; then targets=("${asan_targets[@]}"); else targets=("${tsan_targets[@]}"); fi
    stage_start "$config: build (clang-14, -Werror=thread-safety) and test ${targets[*]}"
    "${clang_bazel[@]}" build "${clang_flags[@]}" --config=$config "${targets[@]}"
    build_rc=$?
    # The build is the thread-safety check: every clang configuration compiles with
    # -Werror=thread-safety (.bazelrc).
    check "thread-safety analysis and build under --config=$config" $build_rc
    if [[ $build_rc -eq 0 ]]; then
      "${clang_bazel[@]}" test "${clang_flags[@]}" --config=$config --test_tag_filters=-gpu \
        "${targets[@]}" 2>&1 | tee /tmp/kvoffload-test-summary.$$ | \
        grep -E "PASSED|FAILED|TIMEOUT|NO STATUS|Executed"
      rc=${PIPESTATUS[0]}
      show_failures "$("${clang_bazel[@]}" info --config=$config bazel-testlogs 2>/dev/null)" \
        < /tmp/kvoffload-test-summary.$$
      read -r p f t < <(test_targets "${targets[@]}" | \
        count_cases "$("${clang_bazel[@]}" info --config=$config bazel-testlogs 2>/dev/null)")
      if [[ $rc -ne 0 && $f -eq 0 ]]; then f=1; fi
      echo "$config: $p passed, $f failed in $t targets"
      passed=$((passed + p))
      failed=$((failed + f))
    fi
    stage_end
  done

  stage_start "fuzz: //tests/fuzz:service_fuzzer for ${fuzz_seconds} s (libFuzzer, ASan, UBSan)"
  "${clang_bazel[@]}" build "${clang_flags[@]}" --config=fuzz //tests/fuzz:service_fuzzer
  fuzz_rc=$?
  if [[ $fuzz_rc -eq 0 ]]; then
    fuzzer="$("${clang_bazel[@]}" info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz/service_fuzzer"
    corpus=$(mktemp -d /tmp/kvoffload-fuzz.XXXXXX)
    # New inputs go to the scratch corpus; the committed one is only read. Leak checks run in
    # the ASan tests: here they would rescan the heap after most inputs (copies end
    # asynchronously), cutting the rate five-fold. -detect_leaks=0 stops libFuzzer's check per
    # input, ASAN_OPTIONS the one at exit, which found gRPC's sync-server thread manager with a
    # worker thread half made as the process ended (a CI run of 87fd0b7: 88 bytes in
    # grpc::ThreadManager::MainWorkLoop after 18,210 clean inputs).
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
    "$fuzzer" -max_total_time="$fuzz_seconds" -timeout=30 -detect_leaks=0 -print_final_stats=1 \
      -artifact_prefix="$corpus/" "$corpus" tests/fuzz/corpus/service > "$corpus.log" 2>&1
    fuzz_rc=$?
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)" "$corpus.log"
    if [[ $fuzz_rc -ne 0 ]]; then
      tail -60 "$corpus.log"
      echo "fuzz: failing input kept in $corpus (crash-*, oom-*, timeout-*)"
    else
      rm -rf "$corpus" "$corpus.log"
    fi
  fi
  check "service_fuzzer for ${fuzz_seconds} s" $fuzz_rc
  stage_end
fi

stage_start "deploy and docs checks"
# The flagfile's defaults are compared with the daemon's own (kvoffloadd --helpfull).
kvoffloadd="$(bazel info bazel-bin 2>/dev/null)/daemon/kvoffloadd"
for c in deploy/verify_unit.sh deploy/install_test.sh "python3 proto/gen_api_doc.py --check" \
    "python3 tests/bench/gpu/fixed_cost.py --self_test" \
    "python3 tests/bench/restart_report.py --self_test" \
    "python3 python/tests/vllm_signatures.py check" \
    "python3 tests/docs/check_metrics_doc.py" "python3 tests/docs/check_metrics_doc.py --self_test" \
    "python3 tests/docs/check_flagfile.py --kvoffloadd $kvoffloadd" \
    "python3 tests/docs/check_flagfile.py --self_test --kvoffloadd $kvoffloadd" \
    "python3 tests/docs/check_one_home.py" "python3 tests/docs/check_one_home.py --self_test" \
    "python3 tests/docs/check_no_issue_numbers.py" \
    "python3 tests/docs/check_no_issue_numbers.py --self_test" \
    "python3 tests/docs/check_error_decisions.py" \
    "python3 tests/docs/check_error_decisions.py --self_test"; do
  $c
  check "$c" $?
done
stage_end

echo "== wall time per stage"
for t in "${stage_times[@]}"; do echo "  $t"; done
passed=$((passed + checks_passed))
failed=$((failed + checks_failed))
rm -f /tmp/kvoffload-test-summary.$$
echo "$passed passed, $failed failed"
[[ $failed -eq 0 && $bazel_rc -eq 0 ]]
