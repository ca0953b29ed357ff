#!/usr/bin/env bash
# One GPU at the scale users train (bench/gpu_lora_8b_bench.py): LoRA at Llama-3-8B's shape at L_t 4,096 and
# 8,192 (peak GPU memory against docs/training.md's computed table, tokens/s, MFU, the base's load time) and full
# fine-tuning at Llama-3.2-1B's shape at L_t 4,096 in bf16 parameters (tokens/s, MFU, peak memory). Prints JSON.
#   bench/gpu_lora_8b_bench.sh [--phases lora,full-1b,lora-auto,lora-long] [--json-out FILE]
# Run by `make gpu-bench` (bench/gpu_bench_call.sh, phase by phase) and `make gpu-check`; BENCH_DEVICE=cpu runs
# small shapes on the CPU in seconds (the script's own check, bench/tests/lora_8b_bench_test.py in `make test`).
# Its bases (16 GB at 8B) go into a folder of its own under BENCH_WORK_DIR (default TMPDIR or /tmp), removed on
# any exit, SIGTERM and SIGINT included (the Python child is stopped first); a folder left by a run killed with
# SIGKILL (whose owner is gone) is removed by the next run. Before writing a base it checks the free disk there
# and the available host memory and refuses in one line (exit 2) naming what it needs and what is there.
# Without a visible GPU (BENCH_DEVICE=cuda, the default) it prints {"benchmark": ..., "skipped": "why"}, exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
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
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  rm -rf "$work"
  trap - EXIT
  exit $((128 + $1))
}
trap 'rm -rf "$work"' EXIT
trap 'stop 15' TERM
trap 'stop 2' INT
BENCH_WORK=$work BENCH_DEVICE=${BENCH_DEVICE:-cuda} "$BENCH_PYTHON" bench/gpu_lora_8b_bench.py "$@" &
child=$!
status=0
wait "$child" || status=$?
child=
exit "$status"
