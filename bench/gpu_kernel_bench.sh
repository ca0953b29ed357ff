#!/usr/bin/env bash
# The project's CUDA kernels that no GPU has run yet against the ATen calls they replace, at GPT-2 medium's
# shapes ($BUILD_DIR/bench/kernel_bench: the linears' bias gradients, the residual add fused with the norm).
# Prints JSON; run by bench/run.sh (`make bench`) and `make gpu-session`. Without a visible GPU it prints
# {"benchmark": ..., "skipped": "why"}.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exe=$BUILD_DIR/bench/kernel_bench
if [[ ! -x $exe ]]; then
  echo "gpu_kernel_bench: $exe does not exist: build it (ninja -C $BUILD_DIR kernel_bench)" >&2
  exit 2
fi
exec "$exe" --device cuda
