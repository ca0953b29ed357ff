#!/usr/bin/env bash
# The LM head's three GEMMs with the logits' rows 16-byte aligned (segtrain's padded buffer) or not (a
# [rows, 50257] tensor), on the GPU (bench/gpu_logits_gemm_bench.py). Prints JSON; run by bench/run.sh
# (`make bench`) and `make gpu-session`. Without a visible GPU it prints {"benchmark": ..., "skipped": "why"}.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/gpu_logits_gemm_bench.py
