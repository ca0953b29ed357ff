#!/usr/bin/env bash
# Tokenizer throughput: `segtrain prepare --tokenizer DIR` (native byte-level BPE,
# sentencepiece) vs the Python `tokenizers` library on the same linux-doc corpus,
# 1 thread and all threads, MB/s (bench/tokenizer_bench.py). Prints JSON; run by
# bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/tokenizer_bench.py --segtrain "$BUILD_DIR/trainer/segtrain" "$@"
