#pragma once
// The CUDA kernel of kernels/rope.h (rope_cuda.cu), in CUDA builds only.
#include <ATen/core/Tensor.h>

namespace segtrain::kernels {

// out[b, h, t, d] = rope_element(in[b, h, t, :], cos[b, 0, t, :], sin[b, 0, t, :], d): a
// contiguous [B, H, T, D] tensor of `out_dtype`. `in` is any 4-D CUDA tensor of fp32,
// bf16 or fp16 with any strides; cos and sin contiguous fp32 [B or 1, 1, T, rd].
// `transposed`: the gradient's rotation (rope_element.h).
at::Tensor rope_cuda(const at::Tensor& in, const at::Tensor& cos, const at::Tensor& sin, bool transposed,
                     at::ScalarType out_dtype);

}  // namespace segtrain::kernels
