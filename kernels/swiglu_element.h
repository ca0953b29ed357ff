#pragma once
// SwiGLU's per-element arithmetic, shared by the CUDA kernel (swiglu_cuda.cu) and its host test
// (tests/models/swiglu_test.cpp): silu(g) u and its gradient, in fp32 whatever the tensors' dtype.
#include <cmath>

#include "kernels/host_device.h"

namespace segtrain::kernels {

struct SwigluGradient {
  float gate, up;
};

SEGTRAIN_HOST_DEVICE inline float swiglu_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

// silu(g) u, silu as ATen computes it (g / (1 + exp(-g))), one rounding to the caller's dtype after it.
SEGTRAIN_HOST_DEVICE inline float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// d/dg = d u sigmoid(g) (1 + g (1 - sigmoid(g))) (ATen's silu_backward times u), d/du = d silu(g).
SEGTRAIN_HOST_DEVICE inline SwigluGradient swiglu_gradient(float g, float u, float d) {
  const float s = swiglu_sigmoid(g);
  return {d * u * s * (1.0f + g * (1.0f - s)), d * g * s};
}

}  // namespace segtrain::kernels
