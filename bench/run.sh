#!/usr/bin/env bash
# `make bench`: runs every built benchmark (build/bench/*_bench) and every
# bench/*_bench.sh script, and keeps its
# JSON in bench/results/<name>.json; then prints a markdown summary.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
mkdir -p bench/results
shopt -s nullglob
ran=0
for exe in "$BUILD_DIR"/bench/*_bench; do
  name=$(basename "$exe")
  echo "== $name" >&2
  "$exe" >"bench/results/$name.json.tmp"
  mv "bench/results/$name.json.tmp" "bench/results/$name.json"
  ran=$((ran + 1))
done
for script in bench/*_bench.sh; do
  name=$(basename "$script" .sh)
  echo "== $name" >&2
  BUILD_DIR=$BUILD_DIR bash "$script" >"bench/results/$name.json.tmp"
  mv "bench/results/$name.json.tmp" "bench/results/$name.json"
  ran=$((ran + 1))
done
[[ $ran -gt 0 ]] || { echo "bench: no benchmarks are built yet" >&2; exit 0; }
.venv/bin/python bench/summarize.py bench/results
