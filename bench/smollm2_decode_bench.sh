#!/usr/bin/env bash
# Decoding speed on the real base: tokens/s of KV-cache steps of SmolLM2-135M after a
# 16,384-token prompt, segtrain generate vs transformers' generate, each in its own
# process, median of BENCH_ROUNDS (default 5) alternated rounds with the spread
# (bench/smollm2_decode_bench.py; each round reads the prompt twice: minutes on 2 cores).
# BENCH_DECODE_PROMPT (default 16384) for a shorter check. Prints JSON; run by bench/run.sh
# (`make bench`); skipped, saying why, without the base.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/smollm2_decode_bench.py --prompt "${BENCH_DECODE_PROMPT:-16384}"
