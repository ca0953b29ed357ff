#!/usr/bin/env bash
# `segtrain prepare` on a generated JSONL corpus of --corpus-mb MB (default 256; the issue's figure:
# --corpus-mb 4096): peak RSS, MB/s and tokens/s at 1 and at all threads, and whether the two
# stores are the same byte for byte (bench/prepare_bench.py). Prints JSON; run by bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/prepare_bench.py --segtrain "$BUILD_DIR/trainer/segtrain" "$@"
