#pragma once
// The CUDA kernel of kernels/cross_entropy.h (cross_entropy_cuda.cu), in CUDA builds only.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace segtrain::kernels {

// One block a row of the CUDA logits [rows, vocab] (fp32, bf16 or fp16; unit stride along a row,
// rows at least vocab apart: a padded buffer's are taken as they lie): returns the
// rows' nll [rows] fp32 (cross_entropy_element.h) and, when `gradient`, writes d nll / d logits
// over the logits (zero rows where targets [rows], contiguous int64, hold ignore_index).
at::Tensor cross_entropy_cuda(at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index, bool gradient);

}  // namespace segtrain::kernels
