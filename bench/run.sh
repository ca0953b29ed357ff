#!/usr/bin/env bash
# `make bench`: runs every built benchmark ($BUILD_DIR/bench/*_bench) and every
# bench/*_bench.sh script, keeps each one's JSON in bench/results/<name>.json,
# then prints a markdown summary (bench/summarize.py).
#   bench/run.sh [NAME...]   only the named benchmarks (e.g. gpu_speed_bench), and
#                            a summary of those alone
# The configuration (bench/env.sh): SEGTRAIN_CUDA=1 runs build-cuda with .venv-cuda.
# A benchmark that cannot run here (the GPU ones without a visible GPU) prints
# {"benchmark": ..., "skipped": "why"}, which the summary shows as such.
# bench/smollm2_bench.sh (and gpu_smollm2_bench.sh) train the real SmolLM2-135M shape
# against transformers; from its real weights after `make real-base` (about 7 minutes);
# bench/smollm2_forward_bench.sh times a 32,768-token evaluation forward of it against
# transformers' (about 35 minutes for its 3 rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
mkdir -p bench/results
shopt -s nullglob
wanted=("$@")
selected() {
  ((${#wanted[@]} == 0)) && return 0
  local w
  for w in "${wanted[@]}"; do [[ $w == "$1" ]] && return 0; done
  return 1
}
ran=()
run_one() {  # NAME COMMAND...
  local name=$1
  shift
  echo "== $name" >&2
  "$@" >"bench/results/$name.json.tmp"
  mv "bench/results/$name.json.tmp" "bench/results/$name.json"
  ran+=("$name")
}
for exe in "$BUILD_DIR"/bench/*_bench; do
  name=$(basename "$exe")
  selected "$name" && run_one "$name" "$exe"
done
for script in bench/*_bench.sh; do
  name=$(basename "$script" .sh)
  selected "$name" && run_one "$name" bash "$script"
done
for w in "${wanted[@]}"; do
  [[ " ${ran[*]} " == *" $w "* ]] || { echo "bench: no benchmark named '$w' (bench/*_bench.sh or $BUILD_DIR/bench/*_bench)" >&2; exit 2; }
done
((${#ran[@]})) || { echo "bench: no benchmarks are built yet" >&2; exit 0; }
if ((${#wanted[@]})); then
  "$BENCH_PYTHON" bench/summarize.py bench/results --only "$(IFS=,; echo "${ran[*]}")"
else
  "$BENCH_PYTHON" bench/summarize.py bench/results
fi
