#!/usr/bin/env bash
# Training speed: segtrain train vs an equivalent PyTorch loop, tokens/s and MFU,
# median of BENCH_ROUNDS (default 5) interleaved rounds with the spread
# (bench/train_bench.py speed). Prints JSON; run by bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/train_bench.py speed
