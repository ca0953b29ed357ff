#!/usr/bin/env bash
# Training on the real shape, SmolLM2-135M (llama, 30 x d576, GQA 9/3 heads, tied 49,152
# vocabulary), from runs/bases/smollm2-135m's real weights when `make real-base` made it
# (else a random init of the same config): segtrain train vs the transformers
# LlamaForCausalLM eager loop, fp32 on the CPU, 1 x 512 tokens per step, tokens/s and
# peak RSS, median of BENCH_ROUNDS (default 5) interleaved rounds with the spread
# (bench/smollm2_bench.py cpu). Prints JSON; run by bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/smollm2_bench.py cpu
