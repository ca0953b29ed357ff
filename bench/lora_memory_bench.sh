#!/usr/bin/env bash
# LoRA against full fine-tuning on SmolLM2-135M's real weights (`make real-base`): the
# parameters that train, the optimizer's state and its bytes a trainable parameter, the
# checkpoint's model file, tokens/s and peak RSS of full fp32, full bf16, LoRA and LoRA+
# (bench/lora_memory_bench.py). Prints JSON; run by bench/run.sh (`make bench`).
# About 3 minutes on 2 cores; skipped (with the reason) without the base.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/lora_memory_bench.py
