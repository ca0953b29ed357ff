#pragma once
// The CUDA kernels of kernels/swiglu.h (swiglu_cuda.cu), in CUDA builds only.
#include <ATen/core/Tensor.h>

#include <utility>

namespace segtrain::kernels {

// silu(gate) * up of two contiguous CUDA tensors of one shape and dtype (fp32, bf16 or fp16),
// in that dtype (swiglu_element.h).
at::Tensor swiglu_cuda(const at::Tensor& gate, const at::Tensor& up);

// (d gate, d up) for the output's gradient `grad`, contiguous, of gate's shape and dtype.
std::pair<at::Tensor, at::Tensor> swiglu_backward_cuda(const at::Tensor& gate, const at::Tensor& up,
                                                       const at::Tensor& grad);

}  // namespace segtrain::kernels
