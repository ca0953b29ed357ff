#pragma once
// The CUDA kernels of kernels/linear.h (bias_gradient_cuda.cu), in CUDA builds only.
#include <ATen/core/Tensor.h>

#include <utility>

namespace segtrain::kernels {

// The column sums of a contiguous [rows, cols] CUDA tensor (fp32, bf16 or fp16), added in fp32 in
// bias_gradient_plan.h's order and rounded once to its dtype: a linear's bias gradient.
at::Tensor column_sums_cuda(const at::Tensor& grad);

// GELU's gradient d pre = dy gelu'(pre) (gelu_element.h; `tanh`: the tanh approximation) in pre's
// dtype, and its column sums as column_sums_cuda adds them (of d pre as rounded), from one read of
// pre and dy: contiguous [rows, cols] CUDA tensors of one dtype.
std::pair<at::Tensor, at::Tensor> gelu_backward_column_sums_cuda(const at::Tensor& pre, const at::Tensor& dy,
                                                                 bool tanh);

}  // namespace segtrain::kernels
