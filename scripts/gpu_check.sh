#!/usr/bin/env bash
# `make gpu-check` and `make gpu-session`: everything a user checks on a GPU machine, in one
# command, in this order (what a short allocation must not lose comes first):
#   build     the CUDA configuration, only what the GPU suite runs (segtrain, segtrain-launch,
#             gpu_test), against SEGTRAIN_TORCH_PYTHON's torch and SEGTRAIN_OFFLINE's packages
#             when they are set (a machine without a registry: docs/gpus.md);
#   runs      the gpu tests that run the binary on one GPU (train, SIGTERM and resume, evaluate,
#             export, a run of each architecture);
#   attention the 32k-token attention memory test;
#   one-step  one optimizer step per architecture on the device against the CPU;
#   speed     segtrain against the PyTorch eager loop and, without --deadline, the same loop under
#             torch.compile: tokens/s and MFU (bench/gpu_speed_bench.sh);
#   memory    peak GPU memory by method (bench/gpu_memory_bench.sh);
#   two-ranks the 2-rank tests: both ranks on one GPU over Gloo, and with 2 GPUs, NCCL with one each;
#   rest      every other gpu test (none today: a test added later is never left out);
#   storage   train.param_dtype x shard_optimizer memory (bench/gpu_param_dtype_memory_bench.sh);
#   logits    the LM head's GEMMs with the logits' rows aligned (segtrain's padded buffer) or not
#             (bench/gpu_logits_gemm_bench.sh);
#   kernels   the kernels of SEGTRAIN_FUSED_KERNELS=all against the ATen calls they replace: the linears'
#             bias gradients, the residual add fused with the norm (bench/gpu_kernel_bench.sh);
#   sdpa      which attention kernels take grouped-query attention (bench/gpu_sdpa_backends_bench.sh);
#   lora-8b   LoRA at Llama-3-8B's shape at L_t 4,096 and 8,192 and full fine-tuning at Llama-3.2-1B's
#             (bench/gpu_lora_8b_bench.sh): only without --deadline; a session (`make gpu-session`) runs
#             it as a call of its own after this one, `make gpu-bench` (bench/gpu_bench_call.sh).
# A benchmark runs whether or not a test failed. Every phase runs under a time limit, so one hang
# costs that phase alone; with --deadline the whole command ends by itself within that many
# seconds, each phase taking what is left after the phases that must still run (a phase with
# too little time is reported as not run, and why).
#
# usage: scripts/gpu_check.sh [--out DIR] [--deadline SECONDS]
#   --out DIR       (default bench/results/gpu-check) written as the command goes, 10 files, so that
#                   a command that is killed still leaves what finished:
#                     report.md   the machine and versions, each phase, each test as it finishes
#                                 (✓ passed, ✗ failed, ○ not applicable here, and why), the first
#                                 lines of each failure, every figure the tests and benchmarks measured;
#                     log.txt     everything the build, the tests and the benchmarks printed;
#                     measured.txt the figures the tests measured, one a line;
#                     gpu_speed_bench.json, gpu_memory_bench.json, gpu_param_dtype_memory_bench.json,
#                     gpu_logits_gemm_bench.json, gpu_kernel_bench.json, gpu_sdpa_backends_bench.json,
#                     gpu_lora_8b_bench.json
#                     each benchmark's JSON.
#   --deadline S    the whole command ends within S seconds (`make gpu-session`: 540, for an
#                   allocation of 15 minutes with the machine's start and a rerun's margin); the
#                   benchmarks then run at the sizes that fit (GPT-2 medium, 2 rounds, the eager
#                   reference and segtrain's all-kernels and CUDA-graph variants: torch.compile's
#                   compiling does not fit the speed phase's time).
# Exit: 0 every test passed or did not apply and every phase ran; 1 a test or a benchmark failed, or
# a phase was cut by its limit; 2 no CUDA device is visible (the tests say they do not apply, the
# benchmarks skip) or the CUDA configuration cannot be built.
# Environment: GPU_CHECK_SKIP_BUILD=1 uses the build directory as it is; GPU_CHECK_BUILD_DIR
# (default build-cuda) and GPU_CHECK_PYTHON (default .venv-cuda/bin/python) name another build;
# GPU_CHECK_JOBS (tests run at once, default 8); bench/run.sh's BENCH_* variables. On a machine
# without a GPU, SEGTRAIN_GPU_TEST_DEVICE=cpu runs the whole command with the CPU as the device
# (a dry run of this script: the benchmarks skip).
set -uo pipefail
CALLER=$PWD  # a relative --out is the caller's, not the checkout's
cd "$(dirname "$0")/.." || exit 2
OUT=bench/results/gpu-check
DEADLINE=
while (($#)); do
  case $1 in
    --out) OUT=${2:?--out needs a folder}; [[ $OUT == /* ]] || OUT=$CALLER/$OUT; shift 2 ;;
    --deadline) DEADLINE=${2:?--deadline needs seconds}; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1' (usage: scripts/gpu_check.sh [--out DIR] [--deadline SECONDS])" >&2; exit 2 ;;
  esac
done
[[ -z $DEADLINE || $DEADLINE =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --deadline $DEADLINE: expected whole seconds" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
BUILD_DIR=${GPU_CHECK_BUILD_DIR:-build-cuda}
JOBS=${GPU_CHECK_JOBS:-8}
PY=${GPU_CHECK_PYTHON:-.venv-cuda/bin/python}
REPORT=$OUT/report.md
LOG=$OUT/log.txt
MEASURED=$OUT/measured.txt
START=$(date +%s)
# 20 s of the deadline are kept for what follows a phase's limit: timeout's 10 s of grace for a
# phase that overruns, the benchmarks' summaries and the report's last lines.
END=$((START + ${DEADLINE:-315360000} - 20))
rm -f "$REPORT" "$LOG" "$MEASURED" "$OUT"/gpu_*_bench.json
status=0  # 1 once anything failed or was cut; 2 no device / no build

say() { printf '[gpu-check %4ds] %s\n' "$(($(date +%s) - START))" "$*" | tee -a "$LOG" >&2; }
report() { printf '%s\n' "$@" >>"$REPORT"; }
left() { echo $((END - $(date +%s))); }

# The seconds a phase may take: at most CAP (times 4 without a deadline: a slow GPU has the time),
# and with a deadline what is left once RESERVE seconds are kept for the phases after it.
budget() {  # CAP RESERVE
  local cap=$1 reserve=$2
  [[ -z $DEADLINE ]] && { echo $((cap * 4)); return; }
  local b=$(($(left) - reserve))
  echo $((b < cap ? b : cap))
}

# A phase's seconds (budget) into $seconds, or, below MINIMUM, the phase reported as not run and 1.
phase_seconds() {  # NAME CAP RESERVE MINIMUM
  seconds=$(budget "$2" "$3")
  ((seconds >= $4)) && return 0
  report "- $1: not run: $(left) s left, $3 s kept for what follows"
  status=1
  return 1
}

# --- the machine ---------------------------------------------------------------------------
report "# gpu-check report" ""
report "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); segtrain $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')$(
  [[ -n $(git status --porcelain 2>/dev/null) ]] && echo ' with local changes')${DEADLINE:+; deadline $DEADLINE s}"
report "- OS: $( (. /etc/os-release && echo "$PRETTY_NAME") 2>/dev/null); kernel $(uname -r); $(nproc) cores"
report "- GPUs (nvidia-smi): $( (nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader ||
  echo 'none: nvidia-smi did not run') 2>/dev/null | paste -sd';' -)"
report "- nvcc: $( (${CUDACXX:-nvcc} --version | tail -1) 2>&1); cmake: $(cmake --version 2>/dev/null | head -1)"
report "- build: ${SEGTRAIN_OFFLINE:+offline from $SEGTRAIN_OFFLINE, }${SEGTRAIN_TORCH_PYTHON:+torch of $SEGTRAIN_TORCH_PYTHON, }$BUILD_DIR"
report "" "## Phases" ""

# --- build -----------------------------------------------------------------------------------
phase_start=$(date +%s)
if [[ ${GPU_CHECK_SKIP_BUILD:-0} == 1 ]]; then
  say "GPU_CHECK_SKIP_BUILD=1: using $BUILD_DIR as it is"
  report "- build: skipped (GPU_CHECK_SKIP_BUILD=1), $BUILD_DIR as it is"
else
  phase_seconds build 300 200 60 || { say "no time left to build: $REPORT"; exit 2; }
  say "building the CUDA configuration in $BUILD_DIR (segtrain segtrain-launch gpu_test kernel_bench; at most $seconds s)"
  log_lines=$(wc -l <"$LOG")
  # ninja's log as the build begins: ninja and CMake rewrite it (recompact, restat), so this build's steps are
  # the lines it did not hold, not the lines after its old length.
  ninja_before=$(mktemp)
  cp "$BUILD_DIR/.ninja_log" "$ninja_before" 2>/dev/null || : >"$ninja_before"
  SEGTRAIN_CUDA=1 BUILD_DIR=$BUILD_DIR SEGTRAIN_BUILD_TARGETS="segtrain segtrain-launch gpu_test kernel_bench" \
    timeout -k 10 "$seconds" bash scripts/setup.sh >>"$LOG" 2>&1
  build_status=$?
  # kernel_bench serves one bench phase: when its files are the only ones ninja failed on, the three the tests
  # need are built on (ninja stopped at the failure), its stale binary removed, and the session goes on.
  failed=$(tail -n +"$((log_lines + 1))" "$LOG" | sed -n 's/^FAILED: \(\[code=[0-9]*\] \)\{0,1\}\([^ ]*\).*/\2/p')  # ninja 1.12 adds [code=N]
  if ((build_status != 0 && build_status != 124 && build_status != 137)) && [[ -n $failed ]] &&
    ! grep -qv '^bench/CMakeFiles/kernel_bench\.dir/\|^bench/kernel_bench$' <<<"$failed"; then
    rm -f "$BUILD_DIR/bench/kernel_bench"
    rest=$((seconds - ($(date +%s) - phase_start)))
    if ((rest > 0)) &&
      timeout -k 10 "$rest" cmake --build "$BUILD_DIR" --target segtrain segtrain-launch gpu_test >>"$LOG" 2>&1; then
      build_note="; kernel_bench **failed** (its phase says so; log.txt)"
      build_status=0
    fi
  fi
  if ((build_status != 0)); then
    report "- build: **failed** (exit $build_status$( ((build_status == 124)) && echo ': cut by its time limit')) after $(($(date +%s) - phase_start)) s; its last lines:" ""
    tail -25 "$LOG" | sed 's/^/    /' >>"$REPORT"
    say "building the CUDA configuration failed: $REPORT"
    rm -f "$ninja_before"
    exit 2
  fi
  report "- build: ok in $(($(date +%s) - phase_start)) s${build_note:-}"
  # Which steps the build spent its time on (ninja's own log: each step's start and end, ms): their times summed
  # (they overlap, side by side on the cores) and the five longest, a .cu unit or a test file among them.
  if [[ -f $BUILD_DIR/.ninja_log ]]; then
    # A line the log held before (start, end, output and hash; a restat rewrites only the mtime) is an earlier build's.
    steps=$(awk -F'\t' 'FILENAME == ARGV[1] { seen[$1 FS $2 FS $4 FS $5]; next }
      NF >= 5 && $1 !~ /^#/ && !(($1 FS $2 FS $4 FS $5) in seen) && !(($1 FS $2 FS $5) in edge) {
        edge[$1 FS $2 FS $5]; printf "%.1f %s\n", ($2 - $1) / 1000, $4 }' "$ninja_before" "$BUILD_DIR/.ninja_log" | sort -rn)
    if [[ -n $steps ]]; then
      summed=$(awk '{s += $1} END {printf "%.0f", s}' <<<"$steps")
      longest=$(head -5 <<<"$steps" | awk '{n = split($2, p, "/"); printf("%s%s %s s", (NR > 1 ? ", " : ""), p[n], $1)}')
      report "- build's $(wc -l <<<"$steps") steps: their times summed $summed s (overlapping, on $(nproc) cores); the longest: $longest"
    fi
  fi
  rm -f "$ninja_before"
fi
for file in "$BUILD_DIR/trainer/segtrain" "$PY"; do
  [[ -x $file ]] || { report "- $file does not exist: run make build-cuda"; say "$file does not exist"; exit 2; }
done
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
report "- compiler: $compiler, $("$compiler" --version 2>&1 | head -1)"
report "- segtrain --version: $("$BUILD_DIR/trainer/segtrain" --version 2>&1 | paste -sd';' -)"
probe=$("$PY" bench/train_bench.py probe 2>>"$LOG") || { report "- probing torch.cuda with $PY failed (log.txt)"; exit 2; }
field() { "$PY" -c "import json, sys; print(eval(sys.argv[1], {}, json.loads(sys.argv[2])))" "$1" "$probe"; }
gpu_count=$(field 'len(devices)')
report "- torch $(field torch), CUDA $(field cuda_build); $gpu_count GPU(s) visible: $(field '", ".join(devices)')"

# --- tests -----------------------------------------------------------------------------------
# A build without the GPU suite (gpu_test not built) must not read as "every test passed".
gpu_tests=$(cd "$BUILD_DIR" && ctest -N -L gpu | sed -n 's/^Total Tests: //p')
if [[ -z $gpu_tests || $gpu_tests == 0 ]]; then
  report "- $BUILD_DIR has no tests labelled gpu (gpu_test is not built): build it (make build-cuda)"
  say "$BUILD_DIR has no gpu tests: $REPORT"
  exit 2
fi
report "- $gpu_tests gpu tests in $BUILD_DIR"
# Each test's line of ctest's output, as it finishes, becomes a line of the report.
declare -A about=(
  [OneStep.Fp32OnTheDeviceEqualsTheCpu]="one AdamW step in fp32 on the device = the CPU (loss 1e-5, gradients 1e-4, updates 1e-3 relative)"
  [OneStep.LoraStepOnTheDeviceEqualsTheCpu]="one LoRA step (rank 4 on every projection, the norms trained) in fp32 on the device = the CPU, through the trainer's loss path"
  [OneStep.Bf16AutocastOnTheDeviceStaysWithinBf16ToleranceOfFp32OnTheCpu]="the step under bf16 autocast within bf16 bounds of fp32 on the CPU"
  [OneStep.TrainerLossPathFp32OnTheDeviceEqualsTheCpu]="the trainer's loss path (LM-head loss in slices, activation checkpointing), fp32 = the CPU"
  [OneStep.TrainerLossPathBf16AutocastStaysWithinBf16ToleranceOfFp32OnTheCpu]="the trainer's loss path under bf16 autocast within the bf16 bounds"
  [OneStep.TheTrainerLossPathNeverWaitsForTheDevice]="CUDA sync debug mode: a micro-batch never makes the host wait"
  [LongAttention.GroupedQueryAttentionAt32kTokensTakesAFusedKernelInFp32AndBf16]="SmolLM2's attention at 32,768 tokens adds under 1 GiB in fp32 and bf16"
  [DeviceRun.ChunkRunTrainsAndResumesExactly]="a chunk run, stopped by SIGTERM and resumed, follows the uninterrupted run"
  [DeviceRun.Bf16StepsWithActivationCheckpointingEqualStepsWithout]="8 bf16 steps with activation checkpointing = 8 without (1e-3)"
  [DeviceRun.MicroBatchAutoKeepsTheRunsPeakWithinTheBudget]="micro_batch_size auto: a budget halfway between micro-batch 1's and 32's peaks gives a smaller micro-batch whose run peaks within it"
  [DeviceRun.ActivationCheckpointingAutoKeepsTheRunsPeakWithinTheBudget]="activation_checkpointing auto: a budget halfway between no block's and every block's recomputation peaks recomputes 1 to 3 of 4 blocks and its run peaks within it"
  [DeviceRun.CapturedStepFollowsTheOrdinaryStep]="SEGTRAIN_CUDA_GRAPH=1: gpt2 and llama capture forward+backward and the update at step 4, 16 steps within 1e-3 of the ordinary step and the static path, checkpoints saved while replaying; the same with SEGTRAIN_FUSED_KERNELS=all and with =auto; auto trains bloom (ALiBi) uncaptured, saying why"
  [DeviceRun.ACapturedMixtureSplitsItsLossAsTheOrdinaryStep]="SEGTRAIN_CUDA_GRAPH=1 on a mixture: every line's loss by source follows the ordinary step's (1e-3 of a 128-token mean), its token counts exactly, through capture, replays and the capture after an evaluation"
  [DeviceRun.Bf16StepsWithFusedKernelsEqualStepsWithout]="8 bf16 steps with SEGTRAIN_FUSED_KERNELS=1 = 8 with 0, gpt2, gpt_neox, llama, bloom (1e-3; bloom 5e-3), and with =all for gpt2, gpt_neox and llama (the bias-gradient kernels, the residual add fused with the norm), the first step logging the fused paths it took (LayerNorm 16-bit but BLOOM's: its stream is fp32)"
  [FusedKernels.RopeEqualsTheCompositeForwardAndBackward]="the RoPE kernel = ATen's composite, forward and backward, fp32/bf16/fp16"
  [FusedKernels.RmsNormEqualsTheCompositeForwardAndBackward]="ATen's fused RMSNorm = transformers' composite in fp32, forward and backward"
  [FusedKernels.CrossEntropyEqualsTheCompositeLossAndGradient]="the LM head's cross-entropy kernel = ATen's composite, loss and logits' gradient, fp32/bf16/fp16, vocab 50,257 and 128,256, rows in a padded buffer"
  [FusedKernels.HeadSlicesOnCudaAreSizedByTheKernelsBuffers]="the LM head's auto slices on CUDA sized by the cross-entropy kernel's 16-bit buffers: GPT-2 medium's trained head 4,096 tokens (the composite's 1,024)"
  [FusedKernels.SwigluEqualsTheCompositeForwardAndBackward]="the SwiGLU kernels = ATen's silu(gate) * up, value and both gradients, fp32/bf16/fp16, d_ff 14,336, a tail, more than a grid, a gate off a 16-byte boundary"
  [FusedKernels.LayerNormIn16BitsIsAutocastsFp32ResultRounded]="LayerNorm in bf16/fp16 outside autocast = autocast's fp32 LayerNorm rounded (1 ulp), forward and backward"
  [FusedKernels.LinearBiasGradientsEqualAtensLinearAndGelu]="the bias-gradient kernels (SEGTRAIN_FUSED_KERNELS=all) = ATen's linear and gelu: output, d x, d W to a unit, d b within fp32 rounding, GELU's gradient within a unit of gelu_backward, fp32/bf16/fp16"
  [FusedKernels.ResidualNormEqualsTheNormOfTheSumForwardAndBackward]="the residual add fused with LayerNorm and RMSNorm (SEGTRAIN_FUSED_KERNELS=all) = the norm of the sum in double: the sum bit for bit, the norm and d x within a unit, d w and d b within fp32 rounding, fp32/bf16/fp16, 768 to 8,192 wide, the same bits twice"
  [FusedKernels.ColumnSumsCoverEveryRowAtAnySizeAndRepeatBitForBit]="the column-sum kernel: exact integer sums at 100,003 x 8, 5 x 12, 8,192 x 4,096 and off a 16-byte boundary, the same bits twice"
  [FusedKernels.FoldedAlibiTakesAFused16BitKernelAndMatchesTheFp32Bias]="ALiBi folded into q.k: a fused 16-bit SDPA kernel, within bf16 of the fp32 bias"
  [DeviceRun.ExportOfADeviceRunEqualsExportOfTheSameWeightsOnTheCpu]="the export of a device run = the export of the same weights on the CPU"
  [EveryArchitectureRun.TrainsResumesAndEvaluates]="a short run of each architecture: trains, resumes after SIGTERM, evaluates"
  [TwoRanks.EqualOneRank]="2 ranks = 1 rank with the same global batch"
  [TwoRanks.ShardedEqualOneRank]="2 ranks with distributed.shard_optimizer = 1 rank; 1 host wait a step"
  [TwoRanks.ShardedWithBf16ParametersStaysNearOneRank]="the same with train.param_dtype bf16, within bf16 bounds"
  [TwoRanks.ShardedAccumulatingWithBf16ParametersStaysNearOneRank]="ZeRO-2 with train.grad_accum 2 near 1 rank"
  [TwoRanks.ShardedReducingInBf16StaysNearOneRank]="ZeRO-2 with train.reduce_dtype bf16 near 1 rank"
  [TwoRanks.ShardedWithActivationCheckpointingEqualOneRank]="2 sharded ranks with activation checkpointing = 1 rank without"
  [TwoRanks.ARankWhosePeerIsKilledEndsWithAnErrorNotAHang]="rank 1 killed: rank 0 exits 1 naming the collective, no hang"
  [TwoRanks.ABackgroundSaveOfShardedRanksResumesOnOneRank]="a sharded step checkpoint saved in the background resumes on 1 rank"
  [TwoRanks.ASignalToOneRankStopsBothAtTheSameStep]="SIGTERM to rank 1: both save the same step, --resume ends as the uninterrupted run"
)
# "1/7 Test #3: Prefix/Suite.Name/param ....   Passed   12.34 sec" -> a report line.
test_line() {
  local line=$1 name mark time base
  name=$(sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' <<<"$line")
  time=$(grep -oE '[0-9.]+ sec' <<<"$line")
  case $line in
    *" Passed "*) mark="✓" ;;
    *"***Skipped"* | *" Skipped "*) mark="○" ;;
    *) mark="✗" ;;
  esac
  base=$(awk -F/ '{print (NF == 3 ? $2 : $1)}' <<<"$name")
  report "  - $mark $name ($time$( [[ $mark == ✗ ]] && sed -E 's/.*\*\*\*([A-Za-z ]+[a-z]).*/: \1/' <<<"$line"))${about[$base]:+: ${about[$base]}}"
}
# Why the tests that did not apply here did not, and the first lines of each failure, from a
# phase's ctest output (--output-on-failure prints a failed test's output after its line).
phase_details() {  # LOG_OF_THE_PHASE
  local notes failures
  # ctest prints a skipped test's output only into its LastTest.log (this phase's run).
  notes=$(grep -ohE 'not applicable here: .*' "$BUILD_DIR/Testing/Temporary/LastTest.log" 2>/dev/null | sort |
    uniq -c | sed -E 's/^ *([0-9]+) not applicable here: (.*)/    - \2 (\1 tests)/')
  [[ -n $notes ]] && { report "  - not applicable here, because:"; report "$notes"; }
  failures=$(awk '
    /^The following tests|^Errors while running CTest|tests passed, | stop time has been passed/ { failed = 0 }
    / Test +#[0-9]+: / { name = $0; sub(/.* Test +#[0-9]+: /, "", name); sub(/ .*/, "", name); failed = $0 !~ / Passed | Skipped |\*\*\*Skipped/; shown = 0; next }
    failed && shown < 8 && /Failure$|error|Error|Expected|Which is|Value of|actual|what\(\)|SEGFAULT|Exception|Timeout|Not Run/ {
      if (shown == 0) print "    " name ":"
      print "      " $0; ++shown }' "$1")
  [[ -n $failures ]] && { report "  - the first lines of each failure:"; report "$failures"; }
}
# Runs the gpu tests whose names match REGEX (or, with -E, all but those) as one phase.
test_phase() {  # NAME CAP RESERVE CTEST_SELECTION...
  local name=$1 seconds phase_log t0 planned
  phase_seconds "$1" "$2" "$3" 15 || return 0
  shift 3
  say "$name: ctest -L gpu $* (at most $seconds s)"
  report "- $name (ctest -L gpu $*, at most $seconds s):"
  phase_log=$(mktemp)
  # The phase's tests, to name those its time did not reach.
  mapfile -t planned < <(cd "$BUILD_DIR" && ctest -N -L gpu "$@" | sed -n -E 's/^ *Test +#[0-9]+: (.*)$/\1/p')
  t0=$(date +%s)
  (cd "$BUILD_DIR" && SEGTRAIN_GPU_TEST_REPORT="$MEASURED" timeout -k 10 "$seconds" ctest -L gpu "$@" -j "$JOBS" \
    --output-on-failure --no-tests=ignore --stop-time "$(date -d "@$((t0 + seconds - 5))" +%H:%M:%S)") 2>&1 |
    tee -a "$LOG" "$phase_log" | while IFS= read -r line; do
      [[ $line =~ Test\ +#[0-9]+:\  ]] && test_line "$line"
    done
  local code=${PIPESTATUS[0]}
  grep -q ' Test \+#[0-9]\+: .*\(\*\*\*Failed\|\*\*\*Timeout\|\*\*\*Exception\|Not Run\)' "$phase_log" && status=1
  if ((code == 124 || code == 137)) || grep -q "stop time has been passed" "$phase_log"; then
    report "  - **cut by its limit ($seconds s)**"
    status=1
  fi
  local t unfinished=()
  for t in "${planned[@]}"; do grep -qF " $t " "$phase_log" || grep -q "Test \+#[0-9]\+: $t " "$phase_log" || unfinished+=("$t"); done
  if ((${#unfinished[@]})); then
    report "  - not run (the phase's time ran out first): ${unfinished[*]}"
    status=1
  fi
  phase_details "$phase_log"
  report "  - $(($(date +%s) - t0)) s; ctest exit $code"
  rm -f "$phase_log"
}

# --- benchmarks ------------------------------------------------------------------------------
bench_phase() {  # NAME CAP RESERVE BENCH [VAR=VALUE...]
  local name=$1 bench=$4 seconds t0 code
  phase_seconds "$1" "$2" "$3" 30 || return 0
  shift 4
  say "$name: bench/$bench.sh $* (at most $seconds s)"
  t0=$(date +%s)
  env SEGTRAIN_CUDA=1 BUILD_DIR="$BUILD_DIR" BENCH_PYTHON="$PY" "$@" timeout -k 10 "$seconds" bash "bench/$bench.sh" \
    >"$OUT/$bench.json.tmp" 2>>"$LOG"
  code=$?
  if ((code == 0)); then
    mv "$OUT/$bench.json.tmp" "$OUT/$bench.json"
    report "- $name: $(($(date +%s) - t0)) s ($OUT/$bench.json)" ""
    "$PY" bench/summarize.py "$OUT" --only "$bench" >>"$REPORT" 2>>"$LOG"
    report ""
  else
    rm -f "$OUT/$bench.json.tmp"
    report "- $name: **failed** (exit $code$( ((code == 124)) && echo ": cut by its limit, $seconds s")) after $(($(date +%s) - t0)) s; its last lines:"
    tail -8 "$LOG" | sed 's/^/    /' >>"$REPORT"
    status=1
  fi
}

# With a deadline, the benchmarks run at the sizes that fit (GPT-2 medium, 2 rounds; compiling GPT-2 medium in
# each round would take the phase's time, bench/gpu_profile.sh runs it); the speed phase measures segtrain with
# the kernels no GPU has run yet too (SEGTRAIN_FUSED_KERNELS=all: the bias gradients, the residual norms) and
# with CUDA graphs on top of them (graph_all, the candidate default) in the same rounds: what all gains, and
# graphs over it (graph_all / all; graphs alone gained 1.079x on the H200, the kernels off).
short=()
[[ -n $DEADLINE ]] && short=(BENCH_SHAPES=gpt2-medium BENCH_ROUNDS=2 BENCH_REFERENCES=eager)
speed=("${short[@]}")
[[ -n $DEADLINE ]] && speed=(BENCH_SHAPES=gpt2-medium BENCH_ROUNDS=2 BENCH_REFERENCES=eager,all,graph_all)
binary='^(DeviceRun\.|OnTheDevice/EveryArchitectureRun\.)'
attention='^LongAttention\.'
one_step='^EveryArchitecture/OneStep\.'
two_ranks='^Placements/TwoRanks\.'
# CAP (at most this, ×4 without a deadline) and RESERVE (kept for the speed and memory benchmarks).
test_phase "runs (the binary on one GPU)" 120 210 -R "$binary"
test_phase "attention (32k tokens)" 45 200 -R "$attention"
test_phase "one-step (each architecture)" 75 190 -R "$one_step"
bench_phase "speed (segtrain vs PyTorch eager; all kernels, and CUDA graphs with them)" 180 60 gpu_speed_bench "${speed[@]}"
bench_phase "memory (peak GPU memory by method)" 90 0 gpu_memory_bench "${short[@]}"
test_phase "two-ranks (one GPU shared over Gloo; a GPU each over NCCL)" 150 0 -R "$two_ranks"
test_phase "rest (every other gpu test)" 60 0 -E "$binary|$attention|$one_step|$two_ranks"
bench_phase "storage (param_dtype x shard_optimizer memory)" 120 0 gpu_param_dtype_memory_bench
bench_phase "logits (the LM head's GEMMs, rows aligned or not)" 30 0 gpu_logits_gemm_bench
bench_phase "kernels (bias gradients, residual norms: ATen's calls vs the all kernels)" 30 0 gpu_kernel_bench
bench_phase "sdpa (attention kernels for grouped-query attention)" 60 0 gpu_sdpa_backends_bench
# Writing a 16 GB base, loading it twice, a 1B base besides: a call of its own in a session (it never had the
# 200 s it needs inside the 540; it now has 300 s in `make gpu-bench`, on this call's build); every phase here.
if [[ -z $DEADLINE ]]; then
  bench_phase "lora-8b (LoRA at Llama-3-8B's shape, L_t 4,096 and 8,192, and 4,096 with activation checkpointing auto; full fine-tuning at Llama-3.2-1B's)" 360 0 gpu_lora_8b_bench
else
  report "- lora-8b: not part of a session: its own call follows this one on the same machine, \`make gpu-bench GPU_OUT=DIR\` (bench/gpu_bench_call.sh, at most 300 s, this call's $BUILD_DIR as it is)"
fi

if [[ -s $MEASURED ]]; then
  report "" "## Measured by the gpu tests" ""
  sed 's/^/    /' "$MEASURED" >>"$REPORT"
fi
report "" "Took $(($(date +%s) - START)) s${DEADLINE:+ of the $DEADLINE s deadline}. Files: $OUT/."
if ((gpu_count == 0)); then
  if [[ ${SEGTRAIN_GPU_TEST_DEVICE:-cuda} == cpu ]]; then
    report "No CUDA device is visible: the gpu tests ran with the CPU as the device (SEGTRAIN_GPU_TEST_DEVICE=cpu), no benchmark ran."
  else
    report "No CUDA device is visible: the gpu tests did not apply and no benchmark ran."
  fi
  say "no CUDA device is visible (torch $(field torch), CUDA $(field cuda_build)${CUDA_VISIBLE_DEVICES+; CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES}): $REPORT"
  ((status == 1)) && exit 1
  exit 2
fi
say "$( ((status == 0)) && echo "every gpu test passed or did not apply, every benchmark ran" || echo "something failed or was cut"): $REPORT"
exit "$status"
