#pragma once
// LayerNorm's and RMSNorm's arithmetic per element, shared by the kernels that fuse them with the
// residual add (residual_norm_cuda.cu) and their host test (tests/models/residual_norm_test.cpp),
// in fp32 whatever the tensors' dtype. A row's statistics come from the block's sums: mean =
// sum(s) / D, var = sum((s - mean)^2) / D (two passes over values the kernel holds in registers, as
// exact as ATen's Welford), rstd = 1 / sqrt(var + eps). RMSNorm is the same arithmetic with mean
// and mean_g taken as 0 (var is then the mean square) and no bias.
#include <cmath>

#include "kernels/host_device.h"

namespace segtrain::kernels {

// x^ = (s - mean) rstd: the normalised value, before the weight and bias.
SEGTRAIN_HOST_DEVICE inline float layer_norm_normalized(float s, float mean, float rstd) { return (s - mean) * rstd; }

// The normed output, x^ w + b.
SEGTRAIN_HOST_DEVICE inline float layer_norm_output(float s, float mean, float rstd, float w, float b) {
  return layer_norm_normalized(s, mean, rstd) * w + b;
}

// The gradient reaching the residual sum s through the norm, plus the one reaching it directly
// (d sum: what the next residual add and later layers send back). With g = dy w per element,
// mean_g = mean(g) and mean_gx = mean(g x^) over the row:
//   rstd (g - mean_g - x^ mean_gx) + d sum
// (d/ds of LayerNorm, the form ATen's backward computes in other words).
SEGTRAIN_HOST_DEVICE inline float layer_norm_input_gradient(float g, float normalized, float mean_g, float mean_gx,
                                                            float rstd, float d_sum) {
  return rstd * (g - mean_g - normalized * mean_gx) + d_sum;
}

}  // namespace segtrain::kernels
