#!/usr/bin/env bash
# Peak RSS of segtrain train: truncate, chunk-0.25 and full at L_e = 4 L_t
# (bench/train_bench.py memory). Prints JSON; run by bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/train_bench.py memory
