#!/usr/bin/env bash
# Evaluation speed on the real base: one 32,768-token fp32 forward of SmolLM2-135M
# (runs/bases/smollm2-135m, `make real-base`), segtrain eval vs transformers, each in
# its own process, median of BENCH_ROUNDS (default 3) alternated rounds with the
# spread (bench/smollm2_forward_bench.py; about 11 minutes a round on 2 cores).
# BENCH_FORWARD_LENGTH (default 32768) for a shorter check. Prints JSON; run by
# bench/run.sh (`make bench`); skipped, saying why, without the base.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/smollm2_forward_bench.py --length "${BENCH_FORWARD_LENGTH:-32768}"
