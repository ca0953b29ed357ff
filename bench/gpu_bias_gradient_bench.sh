#!/usr/bin/env bash
# The linears' bias gradients on the GPU: ATen's sum (and gelu_backward) against kernels/linear.h's column-sum
# kernels at GPT-2 medium's shapes ($BUILD_DIR/bench/bias_gradient_kernel_bench). Prints JSON; run by
# bench/run.sh (`make bench`) and `make gpu-session`. Without a visible GPU it prints
# {"benchmark": ..., "skipped": "why"}.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env.sh
exe=$BUILD_DIR/bench/bias_gradient_kernel_bench
if [[ ! -x $exe ]]; then
  echo "gpu_bias_gradient_bench: $exe does not exist: build it (ninja -C $BUILD_DIR bias_gradient_kernel_bench)" >&2
  exit 2
fi
exec "$exe" --device cuda
