#!/usr/bin/env bash
# train.param_dtype fp32 vs bf16, shard_optimizer false vs true on GPUs, at 1, 2 and the node's GPU
# count (at most 8) ranks, as many as are visible: rank 0's optimizer state and peak GPU memory
# (metrics.jsonl peak_gpu_mb, peak_gpu_reserved_mb) of a 162M-parameter llama as bytes a parameter
# against the design, every rank's GPU memory as nvidia-smi sees it (BENCH_DEVICE=cuda
# bench/param_dtype_bench.py ranks). Prints JSON; run by bench/run.sh (`make bench`, `make gpu-check`).
# Without a visible GPU, or in the CPU configuration, it prints {"benchmark": ..., "skipped": "why"}
# and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
BENCH_DEVICE=cuda exec "$BENCH_PYTHON" bench/param_dtype_bench.py ranks
