#!/usr/bin/env bash
# The SmolLM2-135M training bench on the first GPU (bench/smollm2_bench.py cuda: fp32,
# 8 x 2048 tokens per step; tokens/s, peak RSS and peak GPU memory, segtrain vs
# transformers). Prints JSON; run by bench/run.sh (`make bench`, SEGTRAIN_CUDA=1 for the
# CUDA configuration). Without a visible GPU, a torch without CUDA or a segtrain built
# without it, it prints {"benchmark": ..., "skipped": "why"} and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/smollm2_bench.py cuda
