#!/usr/bin/env bash
# The test harness itself, on any machine: ctest reports a test "Skipped" only when the test
# says it does not apply here (SKIP_NOT_APPLICABLE: no CUDA device visible, no root, ...), never
# when it could not run. GoogleTest prints every test of a suite whose set-up failed as
# "[  SKIPPED ]" (and exits 1); with gtest_discover_tests' skip expression, a `segtrain` that
# could not start once read as "nothing applied here" (issue 46).
# Runs real tests as this build's ctest files define them (tests/discover_tests.cmake), from a
# scratch ctest folder (so that this build's own Testing/ logs are left alone):
#   1. with a `segtrain` that cannot run (SEGTRAIN_TEST_BIN, exit 1), whose suites make their
#      store with it in SetUpTestSuite: a gpu test (the CPU as its device) and a CPU suite's test
#      -> ctest "Failed", exit != 0;
#   2. with no CUDA device visible (CUDA_VISIBLE_DEVICES empty): a one-step gpu test and a
#      two-GPU test -> ctest "Skipped" saying why, exit 0.
# usage: harness_test.sh BUILD_DIR
set -uo pipefail
build=$1
fail() { echo "FAILED: $*"; exit 1; }
for file in "$build/tests/gpu/gpu_test_tests.cmake" "$build/tests/trainer/train_cli_test_tests.cmake"; do
  [[ -f $file ]] || fail "$file does not exist (build gpu_test and train_cli_test first)"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#!/bin/sh\necho "segtrain: cannot start (the harness test'\''s broken binary)" >&2\nexit 1\n' >"$work/broken-segtrain"
chmod +x "$work/broken-segtrain"
gpu_setup=DeviceRun.ChunkRunTrainsAndResumesExactly
cpu_setup=TrainCli.ComputeEquivalentBudgetsAgreeAcrossSamplers
one_gpu=EveryArchitecture/OneStep.Fp32OnTheDeviceEqualsTheCpu/gpt2
two_gpus=Placements/TwoRanks.EqualOneRank/AGpuEach
cat >"$work/CTestTestfile.cmake" <<EOS
include("$build/tests/gpu/gpu_test_tests.cmake")
include("$build/tests/trainer/train_cli_test_tests.cmake")
set_tests_properties($gpu_setup $cpu_setup PROPERTIES ENVIRONMENT "SEGTRAIN_TEST_BIN=$work/broken-segtrain;SEGTRAIN_GPU_TEST_DEVICE=cpu")
set_tests_properties($one_gpu $two_gpus PROPERTIES ENVIRONMENT "CUDA_VISIBLE_DEVICES=")
EOS
# A test's result in ctest's summary line, e.g. "1/1 Test #3: DeviceRun.X ....***Failed  0.05 sec".
outcome() { grep -F " $1 " "$2" | grep -o 'Passed\|\*\*\*Failed\|\*\*\*Skipped\|\*\*\*Not Run\|\*\*\*Timeout' | tr -d '*'; }

# Runs TESTS from the scratch folder: each must be EXPECTED in ctest's summary; returns ctest's exit.
expect_outcome() {  # EXPECTED WHY TESTS...
  local expected=$1 why=$2 log="$work/$1.log" status t
  shift 2
  (cd "$work" && ctest --output-on-failure -R "^($(IFS='|'; echo "$*"))\$") >"$log" 2>&1
  status=$?
  cat "$log"
  for t in "$@"; do
    [[ $(outcome "$t" "$log") == "$expected" ]] ||
      fail "$t $why: ctest says '$(outcome "$t" "$log")', expected $expected"
  done
  return $status
}

expect_outcome Failed "with a segtrain that cannot run" "$gpu_setup" "$cpu_setup"
status=$?
((status != 0)) || fail "ctest exited 0 with the set-ups failed"
echo "ok: a suite whose set-up fails is Failed (ctest exit $status)"

expect_outcome Skipped "with no CUDA device visible" "$one_gpu" "$two_gpus"
status=$?
((status == 0)) || fail "ctest exited $status with every test skipped for no device"
echo "PASSED: set-ups that fail are Failed; a test with no device to run on is Skipped"
