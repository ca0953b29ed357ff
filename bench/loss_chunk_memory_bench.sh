#!/usr/bin/env bash
# Peak RSS of one segtrain train step at vocab 32,000, L 2,048, d_model 256 on the
# CPU with the LM head and cross-entropy over slices of the tokens
# (train.loss_chunk_tokens auto) vs the whole logits (0) (bench/train_bench.py
# loss_chunk). Prints JSON; run by bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/train_bench.py loss_chunk
