#pragma once
// One element of rotary position embedding, as transformers' apply_rotary_pos_emb
// computes it (rotate_half: the first half of the rotated dimensions pairs with the
// second), shared by the CUDA kernel (rope_cuda.cu) and the host test that checks this
// arithmetic against ATen's composite where no GPU is (tests/models/rope_test.cpp).
#include <cstdint>

#include "kernels/host_device.h"

namespace segtrain::kernels {

// The dimension that rotates with `d` (< rotated_dims): its counterpart in the other half.
SEGTRAIN_HOST_DEVICE inline int64_t rope_partner(int64_t d, int64_t rotated_dims) {
  const int64_t half = rotated_dims / 2;
  return d < half ? d + half : d - half;
}

// Output dimension d < rotated_dims of one head's vector, from x = in[d] and y =
// in[partner]. Forward: x cos_d + s y sin_d, with s = -1 in the first half
// (rotate_half's sign). The gradient is the transposed rotation: x cos_d - s y
// sin_partner (the partner's angle: the two halves' angles are equal in every RoPE
// transformers builds, but the transpose does not rely on it).
SEGTRAIN_HOST_DEVICE inline float rope_element(float x, float y, const float* cos, const float* sin, int64_t d,
                                               int64_t rotated_dims, bool transposed) {
  const float sign = d < rotated_dims / 2 ? -1.0f : 1.0f;
  if (!transposed) return x * cos[d] + sign * y * sin[d];
  return x * cos[d] - sign * y * sin[rope_partner(d, rotated_dims)];
}

}  // namespace segtrain::kernels
