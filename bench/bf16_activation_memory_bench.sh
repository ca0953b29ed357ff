#!/usr/bin/env bash
# Activation bytes a token, a layer and a unit of d_model under bf16 autocast, with and without
# model.activation_checkpointing, bf16 and fp32 parameters (bench/param_dtype_bench.py
# activations); bench/memory_table.py reads it. Prints JSON; run by bench/run.sh (`make bench`).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exec "$BENCH_PYTHON" bench/param_dtype_bench.py activations
