#!/usr/bin/env bash
# GPU training speed in bf16: segtrain train vs the equivalent PyTorch eager loop on
# GPT-2 small and GPT-2 medium (355M) shapes at L_t = 1024, tokens/s and MFU, median
# of BENCH_ROUNDS (default 5) interleaved rounds with the spread
# (BENCH_DEVICE=cuda bench/train_bench.py speed). Prints JSON; run by bench/run.sh
# (`make bench`, `make gpu-check`). Without a visible GPU, or in the CPU
# configuration, it prints {"benchmark": ..., "skipped": "why"} and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
BENCH_DEVICE=cuda exec "$BENCH_PYTHON" bench/train_bench.py speed
