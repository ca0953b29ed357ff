#!/usr/bin/env bash
# Peak GPU memory (caching allocator, bf16) of segtrain train: truncate at L_t,
# chunk-0.25 and full at L_e = 4 L_t, L_t = 1024, GPT-2 small and medium shapes
# (BENCH_DEVICE=cuda bench/train_bench.py memory). Prints JSON; run by bench/run.sh
# (`make bench`, `make gpu-check`). Without a visible GPU, or in the CPU
# configuration, it prints {"benchmark": ..., "skipped": "why"} and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
BENCH_DEVICE=cuda exec "$BENCH_PYTHON" bench/train_bench.py memory
