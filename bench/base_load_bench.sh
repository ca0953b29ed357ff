#!/usr/bin/env bash
# A base's loading against one cold read of its files: time and peak host memory of a LoRA
# run from SmolLM2-135M (fp32 and bf16) and from a random 3B Llama in bf16 (written here,
# 6.2 GB, removed after) (bench/base_load_bench.py). Prints JSON. Needs `make real-base`,
# about 16 GB of free disk and 12 GB of memory; about 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/base_load_bench.py "$@"
