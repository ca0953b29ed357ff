#!/usr/bin/env bash
# train.param_dtype fp32 vs bf16, shard_optimizer false vs true, at 1, 2 and 4 ranks: per-rank peak
# RSS and optimizer state of a 162M-parameter llama, the optimizer's and the resident bytes a
# parameter (bench/param_dtype_bench.py ranks). Prints JSON; run by bench/run.sh (`make bench`).
# About 10 minutes on 2 cores; about 18 GB at 4 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/param_dtype_bench.py ranks
