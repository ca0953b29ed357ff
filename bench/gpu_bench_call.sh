#!/usr/bin/env bash
# `make gpu-bench GPU_OUT=DIR`: the second device call of a short allocation (docs/gpus.md), after `make
# gpu-session` on the same machine: one GPU at the scale users train, bench/gpu_lora_8b_bench.py phase by phase,
# most wanted first, each under its own time limit within the deadline:
#   lora       LoRA at Llama-3-8B's shape, L_t 4,096 (writes the 16 GB base, then trains 6 steps on it);
#   full-1b    full fine-tuning at Llama-3.2-1B's shape, L_t 4,096, train.param_dtype bf16;
#   lora-auto  the lora phase with activation checkpointing auto within 22 GiB (a 24 GB card; the same base);
#   lora-long  LoRA at Llama-3-8B's shape, L_t 8,192 (on the same base).
# It builds nothing: it uses $GPU_CHECK_BUILD_DIR (build-cuda) as the first call left it and says whether that
# build is up to date with the sources (ninja's dry run); without it, exit 2 naming the command that makes it.
#
# usage: bench/gpu_bench_call.sh [--out DIR] [--deadline SECONDS]
#   --out DIR      (default bench/results/gpu-bench) written as the call goes, so a killed call keeps what
#                  finished: report.md (machine, build, each phase with its time and headline), summary.md
#                  (bench/summarize.py of the JSON so far, after every phase), gpu_lora_8b_bench.json (a row
#                  for each finished phase, written after each), log.txt (what the bench printed).
#   --deadline S   the call ends within S seconds (default 300); a phase whose share is too small is reported
#                  as not run.
# Exit: 0 every phase ran; 1 a phase failed, was cut or not run; 2 no build, no CUDA device, or a machine
# short of disk or memory for the base (the bench's own one-line refusal is in the report).
# Environment: GPU_CHECK_BUILD_DIR, GPU_CHECK_PYTHON (as scripts/gpu_check.sh); BENCH_WORK_DIR (where the bases
# go, default TMPDIR or /tmp; removed on any exit but SIGKILL, and a SIGKILLed call's folder by the next);
# BENCH_DEVICE=cpu runs the whole call on the CPU with the small shapes (a dry run of this script).
set -uo pipefail
CALLER=$PWD
cd "$(dirname "$0")/.." || exit 2
OUT=bench/results/gpu-bench
DEADLINE=300
while (($#)); do
  case $1 in
    --out) OUT=${2:?--out needs a folder}; [[ $OUT == /* ]] || OUT=$CALLER/$OUT; shift 2 ;;
    --deadline) DEADLINE=${2:?--deadline needs seconds}; shift 2 ;;
    *) echo "gpu-bench: unknown argument '$1' (usage: bench/gpu_bench_call.sh [--out DIR] [--deadline SECONDS])" >&2; exit 2 ;;
  esac
done
[[ $DEADLINE =~ ^[1-9][0-9]*$ ]] || { echo "gpu-bench: --deadline $DEADLINE: expected whole seconds" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
DEVICE=${BENCH_DEVICE:-cuda}
BUILD_DIR=${GPU_CHECK_BUILD_DIR:-build-cuda}
PY=${GPU_CHECK_PYTHON:-.venv-cuda/bin/python}
REPORT=$OUT/report.md
LOG=$OUT/log.txt
JSON=$OUT/gpu_lora_8b_bench.json
START=$(date +%s)
END=$((START + DEADLINE - 15))  # timeout's 10 s of grace for a phase that overruns, and the last lines
rm -f "$REPORT" "$LOG" "$JSON" "$OUT/summary.md"
status=0

say() { printf '[gpu-bench %4ds] %s\n' "$(($(date +%s) - START))" "$*" | tee -a "$LOG" >&2; }
report() { printf '%s\n' "$@" >>"$REPORT"; }
left() { echo $((END - $(date +%s))); }
finish() {  # EXIT_CODE
  report "" "Took $(($(date +%s) - START)) s of the $DEADLINE s deadline. Files: $OUT/."
  exit "$1"
}

report "# gpu-bench report" ""
report "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); segtrain $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')$(
  [[ -n $(git status --porcelain 2>/dev/null) ]] && echo ' with local changes'); deadline $DEADLINE s; device $DEVICE"
report "- GPUs (nvidia-smi): $( (nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader ||
  echo 'none: nvidia-smi did not run') 2>/dev/null | paste -sd';' -)"
report "- host: $(nproc) cores, $(awk '/MemAvailable/ {printf "%.1f GB", $2 * 1024 / 1e9}' /proc/meminfo) memory available"

# --- the first call's build, as it is ------------------------------------------------------------------------
for file in "$BUILD_DIR/trainer/segtrain" "$PY"; do
  if [[ ! -x $file ]]; then
    report "- $file does not exist: this call uses the build of \`make gpu-session\` (or \`make build-cuda\`) on the same machine; run that first"
    say "$file does not exist: run make gpu-session on this machine first (this call builds nothing)"
    finish 2
  fi
done
version=$("$BUILD_DIR/trainer/segtrain" --version 2>&1 | paste -sd';' -)
report "- segtrain --version: $version"
if [[ $DEVICE == cuda && $version != *"CUDA yes"* ]]; then
  report "- $BUILD_DIR/trainer/segtrain is built without CUDA: run make build-cuda (or make gpu-session) first"
  say "$BUILD_DIR/trainer/segtrain is built without CUDA"
  finish 2
fi
if command -v ninja >/dev/null && [[ -f $BUILD_DIR/build.ninja ]]; then
  pending=$(ninja -C "$BUILD_DIR" -n segtrain 2>&1 | grep -c '^\[[0-9]*/[0-9]*\]')
  if ((pending == 0)); then
    report "- $BUILD_DIR: up to date with the sources for segtrain (ninja -n: no work to do); not rebuilt"
  else
    report "- $BUILD_DIR: ninja -n would run $pending steps for segtrain (sources changed or copied anew since the build); used as built, not rebuilt"
  fi
fi
probe=$("$PY" bench/train_bench.py probe 2>>"$LOG") || { report "- probing torch.cuda with $PY failed (log.txt)"; finish 2; }
report "- torch: $probe"
if [[ $DEVICE == cuda && $probe == *'"devices": []'* ]]; then
  report "- no CUDA device is visible: nothing run"
  say "no CUDA device is visible: $REPORT"
  finish 2
fi

# --- the work folder: the bases, shared by the phases, removed on any exit ------------------------------------
parent=${BENCH_WORK_DIR:-${TMPDIR:-/tmp}}
mkdir -p "$parent"
for old in "$parent"/segtrain-lora-8b-*; do
  [[ -d $old && -f $old/owner.pid ]] || continue
  kill -0 "$(cat "$old/owner.pid")" 2>/dev/null || rm -rf "$old"
done
work=$(mktemp -d "$parent/segtrain-lora-8b-XXXXXX")
echo $$ >"$work/owner.pid"
child=
stop() {  # SIGNAL_NUMBER
  trap '' TERM INT
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null
    wait "$child" 2>/dev/null
  fi
  rm -rf "$work"
  trap - EXIT
  report "- stopped by signal $1"
  exit $((128 + $1))
}
trap 'rm -rf "$work"' EXIT
trap 'stop 15' TERM
trap 'stop 2' INT
report "- work folder: $work ($(df -h --output=avail "$work" | tail -1 | tr -d ' ') free)" "" "## Phases" ""

# One phase of the bench, at most CAP seconds and what is left once RESERVE is kept for the phases after it.
phase() {  # NAME CAP RESERVE MINIMUM ABOUT
  local name=$1 cap=$2 reserve=$3 minimum=$4 about=$5 seconds t0 code out
  seconds=$(($(left) - reserve))
  ((seconds > cap)) && seconds=$cap
  if ((seconds < minimum)); then
    report "- $name ($about): **not run**: $(left) s left, $reserve s kept for what follows, it needs about $minimum s"
    status=1
    return
  fi
  say "$name: $about (at most $seconds s)"
  t0=$(date +%s)
  out=$(mktemp)
  env SEGTRAIN_CUDA=1 BUILD_DIR="$BUILD_DIR" BENCH_WORK="$work" BENCH_DEVICE="$DEVICE" \
    timeout -k 10 "$seconds" "$PY" bench/gpu_lora_8b_bench.py --phases "$name" --json-out "$JSON" >"$out" 2>>"$LOG" &
  child=$!
  wait "$child"
  code=$?
  child=
  if ((code == 0)); then
    report "- $name ($about): $(($(date +%s) - t0)) s"
    "$PY" - "$JSON" "$name" >>"$REPORT" 2>>"$LOG" <<'EOF'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])).get("results", []) if r.get("phase") == sys.argv[2]]
keys = ("recomputed_blocks", "tokens_per_s", "mfu", "mfu_nominal", "peak_gpu_gib", "peak_gpu_reserved_gib", "table_total_gib",
        "meets_target", "base_write_s", "base_load_s", "start_to_step1_s", "peak_rss_mb", "trainable_params")
for r in rows:
    print("  - " + ", ".join(f"{k} {r[k]}" for k in keys if r.get(k) is not None))
EOF
  else
    local why="exit $code"
    ((code == 124 || code == 137)) && why="cut by its limit, $seconds s"
    ((code == 2)) && why="refused (exit 2)"
    report "- $name ($about): **failed** ($why) after $(($(date +%s) - t0)) s; the last lines:"
    tail -6 "$LOG" | sed 's/^/    /' >>"$REPORT"
    ((code == 2)) && status=2
    ((status == 0)) && status=1
  fi
  rm -f "$out"
  [[ -f $JSON ]] && "$PY" bench/summarize.py "$OUT" --only gpu_lora_8b_bench >"$OUT/summary.md" 2>>"$LOG"
}

# CAP RESERVE MINIMUM: the first phase writes the 8B base (16 GB) and keeps 60 s for the 1B phase.
phase lora 180 60 90 "LoRA, Llama-3-8B shape, L_t 4,096"
phase full-1b 100 0 45 "full fine-tuning, Llama-3.2-1B shape, L_t 4,096, bf16 parameters"
phase lora-auto 120 0 60 "LoRA, Llama-3-8B shape, L_t 4,096, activation checkpointing auto within 22 GiB"
phase lora-long 180 0 60 "LoRA, Llama-3-8B shape, L_t 8,192"

if [[ -f $OUT/summary.md ]]; then
  report "" "## Summary" ""
  cat "$OUT/summary.md" >>"$REPORT"
fi
say "$( ((status == 0)) && echo "every phase ran" || echo "a phase failed, was cut or did not run"): $REPORT"
finish "$status"
