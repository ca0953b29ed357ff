#pragma once
// GELU's gradient per element, shared by the CUDA kernel that fuses it with the bias gradient
// (bias_gradient_cuda.cu) and its host test (tests/models/linear_test.cpp): ATen's CUDA formulas
// (at::gelu_backward's GeluBackwardCUDAKernelImpl) in its order of operations, in fp32 whatever the
// tensors' dtype, with its constants rounded to fp32.
#include <cmath>

#include "kernels/host_device.h"

namespace segtrain::kernels {

// d/dx of x Phi(x) (approximate "none"): dy (Phi(x) + x phi(x)).
SEGTRAIN_HOST_DEVICE inline float gelu_erf_gradient(float x, float dy) {
  constexpr float kAlpha = 0.70710678118654752440f;         // 1 / sqrt(2)
  constexpr float kBeta = 0.39894228040143267794f;          // 1 / sqrt(2 pi)
  const float cdf = 0.5f * (1.0f + erff(x * kAlpha));
  const float pdf = expf(-0.5f * x * x) * kBeta;
  return dy * (cdf + x * pdf);
}

// d/dx of x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (approximate "tanh", GPT-2's gelu_new).
SEGTRAIN_HOST_DEVICE inline float gelu_tanh_gradient(float x, float dy) {
  constexpr float kBeta = 0.79788456080286535588f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float x_sq = x * x;
  const float inner = kBeta * (x + kKappa * (x_sq * x));
  const float tanh_inner = tanhf(inner);
  const float left_derivative = 0.5f * (1.0f + tanh_inner);
  const float inner_derivative = kBeta * (1.0f + 3.0f * kKappa * x_sq);
  const float right_derivative = 0.5f * x * (1.0f - tanh_inner * tanh_inner) * inner_derivative;
  return dy * (left_derivative + right_derivative);
}

}  // namespace segtrain::kernels
