#!/usr/bin/env bash
# `make gpu-check`: everything a user checks on a GPU machine, in one command.
#   1. builds the CUDA configuration (SEGTRAIN_CUDA=1 BUILD_DIR=build-cuda scripts/setup.sh,
#      as `make build-cuda` does);
#   2. runs the tests labelled `gpu` (ctest -L gpu in build-cuda; they skip themselves,
#      visibly, when no CUDA device is visible);
#   3. with a GPU: the GPU benchmarks (bench/gpu_speed_bench.sh, bench/gpu_memory_bench.sh,
#      bench/gpu_param_dtype_memory_bench.sh: train.param_dtype fp32/bf16 x shard_optimizer at 1, 2
#      and every visible GPU's rank, through bench/run.sh; JSON in bench/results/), then a short report: the GPUs, the
#      test counts, every gpu test with its result and what it checks (the device against
#      the CPU per architecture, the trainer's loss path, no host sync in a micro-batch,
#      2 sharded NCCL ranks against 1, a run of each architecture), the figures the tests
#      measured (bench/results/gpu-check-measured.txt), the benchmark figures against their
#      targets, how to run the GPU experiment grid.
# Exit: 0 the tests passed and the benchmarks ran (a target not met shows as ✗ in the
# report, not in the exit code); 1 a gpu test or a benchmark failed; 2 no CUDA device is
# visible (the tests skipped, no benchmark ran) or the CUDA configuration cannot be built.
# Everything on stdout is also written to bench/results/gpu-check-report.md (the machine, the
# compiler and versions, each test, what was not run and why, the first lines of each failure, the
# benchmark figures): the one file to send back.
# Environment: GPU_CHECK_SKIP_BUILD=1 uses the build directory as it is (no setup.sh);
# GPU_CHECK_BUILD_DIR (default build-cuda); bench/run.sh's BENCH_* variables.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${GPU_CHECK_BUILD_DIR:-build-cuda}
PY=.venv-cuda/bin/python
RESULTS=bench/results
say() { printf '[gpu-check] %s\n' "$*" >&2; }
fail() { printf 'gpu-check: %s\n' "$1"; exit "${2:-1}"; }

# Everything this script prints on stdout also goes to one file a user can send back as it is.
mkdir -p "$RESULTS"
REPORT=$RESULTS/gpu-check-report.md
exec 3>&1 > >(tee "$REPORT" >&3)
tee_pid=$!
trap 'exec 1>&3; wait "$tee_pid"; say "the report: $REPORT"' EXIT
machine_section() {
  echo "# gpu-check report"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); segtrain $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')$(
    [[ -n $(git status --porcelain 2>/dev/null) ]] && echo ' with local changes')"
  echo "- OS: $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null); kernel $(uname -r); $(nproc) cores"
  echo "- GPUs (nvidia-smi): $( (nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader ||
    echo 'none: nvidia-smi did not run') 2>/dev/null | paste -sd';' -)"
  echo "- nvcc: $( (${CUDACXX:-nvcc} --version | tail -1) 2>&1)"
  echo "- build: ${SEGTRAIN_OFFLINE:+offline from $SEGTRAIN_OFFLINE, }${SEGTRAIN_TORCH_PYTHON:+torch of $SEGTRAIN_TORCH_PYTHON, }$BUILD_DIR"
}
machine_section

# --- 1. build ---------------------------------------------------------------------
if [[ ${GPU_CHECK_SKIP_BUILD:-0} == 1 ]]; then
  say "GPU_CHECK_SKIP_BUILD=1: using $BUILD_DIR as it is"
else
  # What the gpu tests and benchmarks run, not the whole CPU suite.
  SEGTRAIN_CUDA=1 BUILD_DIR=$BUILD_DIR SEGTRAIN_BUILD_TARGETS="segtrain segtrain-launch gpu_test" \
    bash scripts/setup.sh || fail "building the CUDA configuration failed (above)" $?
fi
[[ -x $BUILD_DIR/trainer/segtrain ]] || fail "$BUILD_DIR/trainer/segtrain is not built: run make build-cuda" 2
[[ -x $PY ]] || fail "$PY does not exist: run make build-cuda" 2
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
echo "- compiler: $compiler, $("$compiler" --version 2>&1 | head -1)"
echo "- $BUILD_DIR/trainer/segtrain --version: $("$BUILD_DIR/trainer/segtrain" --version 2>&1 | paste -sd';' -)"

# --- what the CUDA torch sees ------------------------------------------------------
probe=$("$PY" bench/train_bench.py probe) || fail "probing torch.cuda with $PY failed (above)" 1
field() { "$PY" -c "import json, sys; print(eval(sys.argv[1], {}, json.loads(sys.argv[2])))" "$1" "$probe"; }
torch_version=$(field torch)
cuda_version=$(field cuda_build)
gpu_count=$(field 'len(devices)')
gpus=$(field '", ".join(f"{n} x {d}" for d, n in __import__("collections").Counter(devices).items())')
[[ $cuda_version != None ]] || fail "torch $torch_version in .venv-cuda has no CUDA: rebuild with make build-cuda" 2

# --- 2. the gpu tests --------------------------------------------------------------
test_log=$RESULTS/gpu-check-tests.log
# The figures the tests measure (differences from the CPU, host waits), one a line.
measured=$RESULTS/gpu-check-measured.txt
measured_path=$(cd "$RESULTS" && pwd)/gpu-check-measured.txt  # for the tests, which run in $BUILD_DIR
rm -f "$measured"
say "running the gpu tests: (cd $BUILD_DIR && ctest -L gpu --output-on-failure)"
(cd "$BUILD_DIR" && SEGTRAIN_GPU_TEST_REPORT="$measured_path" ctest -L gpu --output-on-failure --no-tests=error) 2>&1 |
  tee "$test_log" >&2
ctest_status=${PIPESTATUS[0]}
grep -q "No tests were found" "$test_log" &&
  fail "$BUILD_DIR has no tests labelled gpu (tests/gpu/ is not built): rebuild with make build-cuda" 1
total=$(sed -n 's/.*tests failed out of \([0-9][0-9]*\).*/\1/p' "$test_log" | tail -1)
failed=$(sed -n 's/.*, \([0-9][0-9]*\) tests\{0,1\} failed out of.*/\1/p' "$test_log" | tail -1)
[[ -n $total && -n $failed ]] || fail "could not read ctest's summary (see $test_log); ctest exited $ctest_status" 1
skipped=$(grep -c '(Skipped)' "$test_log")
passed=$((total - failed - skipped))
tests="$passed passed, $failed failed, $skipped skipped (of $total gpu tests in $BUILD_DIR)"

if [[ $gpu_count == 0 ]]; then
  status=2
  ((failed > 0)) && status=1
  printf 'gpu-check: no CUDA device is visible (torch %s, CUDA %s, finds none%s): %s gpu tests skipped, benchmarks not run%s\n' \
    "$torch_version" "$cuda_version" "${CUDA_VISIBLE_DEVICES+; CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES}" \
    "$skipped" "$( ((failed + passed > 0)) && echo " ($passed passed, $failed failed)")"
  exit $status
fi

# --- 3. the GPU benchmarks ---------------------------------------------------------
bench_status=0
if ((failed > 0)); then
  say "a gpu test failed: the benchmarks are not run"
else
  say "running the GPU benchmarks (bench/run.sh gpu_sdpa_backends_bench gpu_speed_bench gpu_memory_bench gpu_param_dtype_memory_bench); several minutes"
  SEGTRAIN_CUDA=1 BUILD_DIR=$BUILD_DIR BENCH_PYTHON=$PY bash bench/run.sh gpu_sdpa_backends_bench gpu_speed_bench \
    gpu_memory_bench gpu_param_dtype_memory_bench \
    >"$RESULTS/gpu-check-bench.md" || bench_status=$?
fi

# --- report ------------------------------------------------------------------------
# What each gpu test (tests/gpu/gpu_test.cpp) checks, by its suite.name.
declare -A about=(
  [OneStep.Fp32OnTheDeviceEqualsTheCpu]="one AdamW step in fp32 on the device = the CPU (loss 1e-5, gradients 1e-4, updates 1e-3 relative)"
  [OneStep.Bf16AutocastOnTheDeviceStaysWithinBf16ToleranceOfFp32OnTheCpu]="the step under bf16 autocast within bf16 bounds of fp32 on the CPU (2e-3, 0.03, 0.3)"
  [OneStep.TrainerLossPathFp32OnTheDeviceEqualsTheCpu]="the trainer's loss path (micro_batch_loss: LM-head loss in slices of 7 tokens, activation checkpointing), fp32 on the device = the CPU"
  [OneStep.TrainerLossPathBf16AutocastStaysWithinBf16ToleranceOfFp32OnTheCpu]="the trainer's loss path under bf16 autocast within the bf16 bounds"
  [OneStep.TheTrainerLossPathNeverWaitsForTheDevice]="CUDA sync debug mode: a micro-batch's copies, forward and backward never make the host wait"
  [DeviceRun.ChunkRunTrainsAndResumesExactly]="a chunk run on the device, stopped by SIGTERM and resumed, follows the uninterrupted run"
  [DeviceRun.TwoRanksEqualOneRank]="2 ranks (NCCL, one GPU each) = 1 rank with the same global batch"
  [DeviceRun.TwoShardedRanksEqualOneRank]="2 ranks with distributed.shard_optimizer (NCCL) = 1 rank; no destroy_process_group warning; 1 host wait a step"
  [DeviceRun.TwoShardedRanksWithBf16ParametersStayNearOneRank]="the same with train.param_dtype bf16 (fp32 master weights), within bf16 bounds"
  [DeviceRun.TwoShardedRanksAccumulatingWithBf16ParametersStayNearOneRank]="ZeRO-2 with train.grad_accum 2 (bf16 parameters, NCCL) near 1 rank"
  [DeviceRun.TwoShardedRanksReducingInBf16StayNearOneRank]="ZeRO-2 with train.reduce_dtype bf16 near 1 rank"
  [DeviceRun.Bf16StepsWithActivationCheckpointingEqualStepsWithout]="8 bf16 steps with activation checkpointing (recomputed on autograd's device thread) = 8 without (1e-3)"
  [DeviceRun.ASignalToOneOfTwoRanksStopsBothAtTheSameStep]="SIGTERM to rank 1 of 2 (NCCL): both save the same step, 143, no destroy_process_group warning, --resume ends as the uninterrupted run"
  [DeviceRun.ExportOfADeviceRunEqualsExportOfTheSameWeightsOnTheCpu]="the export of a device run = the export of the same weights on the CPU"
  [LongAttention.GroupedQueryAttentionAt32kTokensTakesAFusedKernelInFp32AndBf16]="SmolLM2's attention shape (9 query, 3 key/value heads) at 32,768 tokens adds under 1 GiB in fp32 and bf16 (a fused kernel, not math's 85 GiB)"
  [EveryArchitectureRun.TrainsResumesAndEvaluates]="a short run of each architecture on the device: trains, resumes after SIGTERM, finite losses, eval.json"
)
# ctest's log -> one line a test, "mark<TAB>suite.name<TAB>each parameter's mark": a
# parameterized test (Prefix/Suite.Name/param) is one line; ✗ when any part failed.
gpu_test_results() {
  awk '
    / Test +#[0-9]+: / {
      rest = $0; sub(/.* Test +#[0-9]+: /, "", rest)
      name = rest; sub(/ .*/, "", name)
      mark = rest ~ / Passed +[0-9.]+ sec/ ? "✓" : (rest ~ /\*\*\*Skipped/ ? "-" : "✗")
      base = name; param = ""
      if (split(name, part, "/") == 3) { base = part[2]; param = part[3] }
      if (!(base in overall)) { order[++count] = base; overall[base] = mark }
      else if (mark == "✗" || (mark == "✓" && overall[base] == "-")) overall[base] = mark
      if (param != "") params[base] = params[base] (params[base] == "" ? "" : ", ") param " " mark
    }
    END { for (i = 1; i <= count; ++i) printf "%s\t%s\t%s\n", overall[order[i]], order[i], params[order[i]] }
  ' "$1"
}

echo
echo "## gpu-check"
echo
echo "GPUs: $gpu_count visible: $gpus (torch $torch_version, CUDA $cuda_version)"
echo "gpu tests: $tests; log $test_log"
echo
echo "### gpu tests (✓ passed, ✗ failed, - skipped)"
echo
while IFS=$'\t' read -r mark name params; do
  printf -- '- %s %s%s%s\n' "$mark" "$name" "${params:+ [$params]}" "${about[$name]:+: ${about[$name]}}"
done < <(gpu_test_results "$test_log")
if [[ -s $measured ]]; then
  echo
  echo "Measured by the gpu tests ($measured):"
  echo
  sed 's/^/    /' "$measured"
fi
# What did not run, and why (gtest's skip message, from ctest's full log).
last_log=$BUILD_DIR/Testing/Temporary/LastTest.log
if ((skipped > 0)) && [[ -f $last_log ]]; then
  echo
  echo "### Not run"
  echo
  awk '/^\[ RUN      \] / { name = $4 } /: Skipped$/ { getline why; printf "- %s: %s\n", name, why }' "$last_log"
fi
if ((failed > 0)); then
  echo
  grep -A100 "The following tests FAILED" "$test_log"
  echo
  echo "### What failed (each failure's first lines)"
  echo
  grep -B1 -A6 ": Failure$\|Exception: \|SEGFAULT\|what():" "$test_log" | head -80 | sed 's/^/    /'
  echo
  echo "The benchmarks were not run (a gpu test failed)."
  exit 1
fi
if ((bench_status != 0)); then
  echo "benchmarks: failed (exit $bench_status; the error is above)"
  exit 1
fi
echo
"$PY" bench/summarize.py "$RESULTS" --only gpu_speed_bench,gpu_memory_bench,gpu_param_dtype_memory_bench --brief
echo "Every figure: $RESULTS/gpu_sdpa_backends_bench.json, $RESULTS/gpu_speed_bench.json, $RESULTS/gpu_memory_bench.json,"
echo "$RESULTS/gpu_param_dtype_memory_bench.json ($RESULTS/gpu-check-bench.md as tables)."
echo
echo "Next, seed 004's RoPE grid sized for one GPU (configs/experiments/rope-gpu.yaml; its header gives the token"
echo "budget and the time estimate):"
echo "  $BUILD_DIR/trainer/segtrain experiment configs/experiments/rope-gpu.yaml"
echo "  -> runs/experiments/rope-gpu/results.md"
