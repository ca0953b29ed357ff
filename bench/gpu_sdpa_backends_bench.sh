#!/usr/bin/env bash
# Which SDPA kernels take grouped-query attention on the GPU, and their peak memory, at 8k and
# 32k tokens in fp32 and bf16 (bench/gpu_sdpa_backends_bench.py). Prints JSON; run by bench/run.sh
# (`make bench`, `make gpu-check`). Without a visible GPU it prints {"benchmark": ..., "skipped": "why"}.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/gpu_sdpa_backends_bench.py
