#!/usr/bin/env bash
# LoRA on one GPU at Llama-3-8B's shape (random bf16 weights): peak GPU memory and tokens/s of chunk-0.25
# at L_t 4,096 to L_e 65,536 with adapters and norms training, against docs/training.md's computed table
# (bench/gpu_lora_8b_bench.py). Prints JSON; run by `make gpu-check` when the session has time left.
# Needs about 50 GB of free disk for the base it writes (BENCH_WORK_DIR, default the temp dir) and
# 40 GB of host memory. Without a visible GPU, or in the CPU configuration, it prints
# {"benchmark": ..., "skipped": "why"} and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
BENCH_DEVICE=cuda exec "$BENCH_PYTHON" bench/gpu_lora_8b_bench.py
