#pragma once
// Cross-entropy of rows of logits against their targets, and d loss / d logits, for one slice
// of the LM head (models/modules/lm_head_loss.cpp computes the logits slice by slice and folds
// this gradient into the head's). One home for the arithmetic both the fused kernel and ATen's
// composite compute: on a CUDA device with fused kernels (the default) one kernel a row reads the
// 16-bit logits once for the log-sum-exp, once more for the gradient, written over the logits
// in their own dtype; ATen's composite makes an fp32 log-softmax of the slice, an exp, a
// scatter and a cast (a few passes over a [rows, vocab] fp32 buffer: for GPT-2 medium's
// vocabulary the largest memory traffic of the loss).
#include <ATen/ATen.h>

#include <cstdint>

namespace segtrain::kernels {

struct CrossEntropyRows {
  at::Tensor nll;   // [rows] fp32: -log softmax(logits)[target], 0 where the target is ignore_index
  // [rows, vocab] in the logits' dtype when asked for: softmax - onehot(target), computed in
  // fp32 and rounded once. The rows of ignored targets are the caller's to drop (the fused kernel
  // writes zeros there; the composite leaves them, as masking [rows, D] where they meet the
  // weights costs less than a pass over [rows, vocab]).
  at::Tensor grad;
};

// logits [rows, vocab] (fp32, or the autocast dtype the head's matmul gave) and targets [rows]
// int64. The logits are taken: the gradient is written over them (the kernel's, or the
// composite's fp32 gradient converted into them, except for contiguous fp32 logits, whose
// gradient is the composite's own buffer), so the caller hands over a buffer it no longer needs
// (std::move), and its rows may lie further apart than vocab (models/modules/lm_head_loss.h pads
// 16-bit ones for the GEMMs that read the gradient). A target outside [0, vocab) other than
// ignore_index: the composite throws, the kernel (which cannot, without a wait) gives NaN.
CrossEntropyRows cross_entropy_rows(at::Tensor logits, const at::Tensor& targets, int64_t ignore_index,
                                    bool gradient);

// Whether cross_entropy_rows takes the kernel for [rows, vocab] logits of this dtype on this device
// (the switch, the build, the device and the dtype; the shapes the head passes always fit), before any
// logits exist: the head sizes its slices by the buffers the path makes (models/modules/lm_head_loss.h).
bool cross_entropy_kernel_applies(const c10::Device& device, at::ScalarType logits);

// The CUDA kernel whatever the switch says (the gpu suite tests it against the composite);
// InputError where it does not apply (a CPU tensor, a build without CUDA) saying why.
CrossEntropyRows cross_entropy_rows_fused(at::Tensor logits, const at::Tensor& targets, int64_t ignore_index,
                                          bool gradient);

// ATen's composite: log_softmax in fp32, gather, exp, scatter of -1 at the targets; the logits
// are left as they are (the gradient is a new tensor).
CrossEntropyRows cross_entropy_rows_composite(const at::Tensor& logits, const at::Tensor& targets,
                                              int64_t ignore_index, bool gradient);

}  // namespace segtrain::kernels
