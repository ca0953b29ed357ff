#!/usr/bin/env bash
# A prepared device call for the GPT-2 medium step (issue 57, part 3), on the build-cuda a `make gpu-session` of
# the same machine left (nothing is built):
#   1. the profile: GPU time by kernel class of segtrain, the PyTorch eager loop, the same loop under
#      torch.compile and segtrain with SEGTRAIN_FUSED_KERNELS=all, a few steps each (bench/gpu_profile.py; nsys
#      for segtrain when the machine has it, else a CUPTI injection library built on the spot; about 30 s a
#      program; segtrain's two first, then compiled, then eager; a program that would not finish in the
#      profile's time is not started): profile.md, profile.json; within what is left once the speed's
#      SPEED_SECONDS are kept;
#   2. with the time left (at least 170 s; from 120 s only eager, compiled and graph_all: four programs, about
#      108 s; from 90 s eager and compiled), the speed of the
#      three side by side (bench/gpu_speed_bench.sh, GPT-2 medium, BENCH_ROUNDS rounds, default 1 here),
#      segtrain's CUDA-graph variant (SEGTRAIN_CUDA_GRAPH=1),
#      its all-kernels variant (SEGTRAIN_FUSED_KERNELS=all: the kernels no GPU has run yet) and both together
#      (graph_all) in the same rounds, so that each variant / torch.compile ratio that would make it the default,
#      and what the new kernels gain, are measured side by side (the three took 81 s on the H200, 2026-11-29;
#      each variant about as much again, ~27 s): gpu_speed_bench.json, summary.md.
#   SEGTRAIN_CUDA=1 bash bench/gpu_profile.sh --out DIR [--deadline SECONDS]   (default 340)
# report.md says what ran, how long it took, and why anything did not. BENCH_DEVICE=cpu runs step 1 on the CPU
# with a tiny shape (the table-making code's check; bench/tests/profile_test.py) and skips step 2.
set -uo pipefail
CALLER=$PWD
cd "$(dirname "$0")/.." || exit 2
OUT=bench/results/gpu-profile
DEADLINE=340
SPEED_SECONDS=170  # one round of the six programs of step 2 (~27 s each) and the matmul peak
while (($#)); do
  case $1 in
    --out) OUT=${2:?--out needs a folder}; [[ $OUT == /* ]] || OUT=$CALLER/$OUT; shift 2 ;;
    --deadline) DEADLINE=${2:?--deadline needs seconds}; shift 2 ;;
    *) echo "gpu-profile: unknown argument '$1' (usage: bench/gpu_profile.sh --out DIR [--deadline SECONDS])" >&2; exit 2 ;;
  esac
done
[[ $DEADLINE =~ ^[1-9][0-9]*$ ]] || { echo "gpu-profile: --deadline $DEADLINE: expected whole seconds" >&2; exit 2; }
DEVICE=${BENCH_DEVICE:-cuda}
[[ $DEVICE == cuda ]] && export SEGTRAIN_CUDA=1
source bench/env.sh
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
REPORT=$OUT/report.md
LOG=$OUT/log.txt
START=$(date +%s)
END=$((START + DEADLINE - 15))
rm -f "$REPORT" "$LOG" "$OUT/profile.md" "$OUT/profile.json" "$OUT/gpu_speed_bench.json" "$OUT/summary.md"
status=0
report() { printf '%s\n' "$@" >>"$REPORT"; }
left() { echo $((END - $(date +%s))); }
# The caller's timeout signals this script alone (each `timeout` below leads a process group of its own): pass a
# SIGTERM on to the phase running (gpu_profile.py then ends the program it profiles), and stop.
child=
trap '[[ -n $child ]] && kill -TERM "$child" 2>/dev/null; report "- stopped by SIGTERM"; exit 143' TERM
in_background() { "$@" & child=$!; wait "$child"; local code=$?; child=; return "$code"; }
report "# gpu-profile report" "" \
  "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); segtrain $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)'); deadline $DEADLINE s; device $DEVICE" \
  "- GPUs (nvidia-smi): $( (nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo none) 2>/dev/null | paste -sd';' -)" \
  "- nsys: $(command -v nsys || echo 'not on PATH (bench/gpu_profile.py also looks in /usr/local/cuda*/bin and /opt/nvidia; else the CUPTI tracer)')" \
  "- segtrain --version: $("$BUILD_DIR/trainer/segtrain" --version 2>&1 | paste -sd';' -)"
[[ -x $BUILD_DIR/trainer/segtrain ]] || { report "- $BUILD_DIR/trainer/segtrain does not exist: run make gpu-session (or make build-cuda) first; nothing is built here"; exit 2; }

t0=$(date +%s)
seconds=$(($(left) - SPEED_SECONDS))
((seconds > 240)) && seconds=240
((seconds < 110)) && seconds=$(($(left) < 110 ? $(left) : 110))  # the first three programs (~32 s each), at least
if ((seconds >= 45)); then
  # --until: no program is started that would not finish before timeout's limit (its start-up counted).
  in_background env BENCH_DEVICE="$DEVICE" timeout -k 10 "$seconds" "$BENCH_PYTHON" bench/gpu_profile.py run \
    --out "$OUT" --until $((t0 + seconds)) >/dev/null 2>>"$LOG"
  code=$?
  report "- profile: exit $code$( ((code == 124)) && echo ", cut by its limit ($seconds s)") in $(($(date +%s) - t0)) s (profile.md)"
  ((code == 0)) || { status=1; tail -5 "$LOG" | sed 's/^/    /' >>"$REPORT"; }
else
  report "- profile: not run, $seconds s left of the 45 s one program needs at least"
  status=1
fi
[[ -f $OUT/profile.md ]] && { report ""; cat "$OUT/profile.md" >>"$REPORT"; report ""; }

if [[ $DEVICE == cuda ]]; then
  if (($(left) >= 90)); then
    t0=$(date +%s)
    references=eager,compiled,graph,all,graph_all
    (($(left) < SPEED_SECONDS)) && references=eager,compiled,graph_all  # the candidate default against both
    (($(left) < 120)) && references=eager,compiled  # segtrain's default against both (~81 s on the H200)
    in_background env BENCH_SHAPES=gpt2-medium BENCH_ROUNDS="${BENCH_ROUNDS:-1}" BENCH_REFERENCES=$references \
      timeout -k 10 "$(left)" bash bench/gpu_speed_bench.sh >"$OUT/gpu_speed_bench.json.tmp" 2>>"$LOG"
    code=$?
    if ((code == 0)); then
      mv "$OUT/gpu_speed_bench.json.tmp" "$OUT/gpu_speed_bench.json"
      "$BENCH_PYTHON" bench/summarize.py "$OUT" --only gpu_speed_bench >"$OUT/summary.md" 2>>"$LOG"
      report "- speed (segtrain and $references): $(($(date +%s) - t0)) s" "" && cat "$OUT/summary.md" >>"$REPORT"
    else
      rm -f "$OUT/gpu_speed_bench.json.tmp"
      report "- speed: exit $code after $(($(date +%s) - t0)) s"
      status=1
    fi
  else
    report "- speed: not run, $(left) s left of the 90 s it needs at least ($SPEED_SECONDS for every variant): \`SEGTRAIN_CUDA=1 BENCH_SHAPES=gpt2-medium BENCH_REFERENCES=eager,compiled,graph,all,graph_all bash bench/gpu_speed_bench.sh\`"
    status=1
  fi
fi
report "" "Took $(($(date +%s) - START)) s of the $DEADLINE s deadline. Files: $OUT/."
exit "$status"
