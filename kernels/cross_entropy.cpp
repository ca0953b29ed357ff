#include "kernels/cross_entropy.h"

#include <string>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"
#if SEGTRAIN_WITH_CUDA
#include "kernels/cross_entropy_cuda.h"
#endif

namespace segtrain::kernels {

namespace {

// Why the kernel does not take logits of this dtype on this device ("" when it does).
std::string device_refusal(const c10::Device& device, at::ScalarType t) {
  if (!SEGTRAIN_WITH_CUDA) return "this build of segtrain has no CUDA";
  if (!device.is_cuda()) return "it takes CUDA tensors; got logits on " + device.str();
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf)
    return std::string("it takes fp32, bf16 or fp16 logits; got ") + c10::toString(t);
  return "";
}

// Why the kernel does not take these tensors ("" when it does).
std::string fused_refusal(const at::Tensor& logits, const at::Tensor& targets) {
  if (std::string why = device_refusal(logits.device(), logits.scalar_type()); !why.empty()) return why;
  if (!targets.is_cuda()) return "it takes CUDA tensors; got targets on " + targets.device().str();
  if (logits.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits.size(0) ||
      targets.scalar_type() != at::kLong)
    return "it takes logits [rows, vocab] and int64 targets [rows]";
  return "";
}

}  // namespace

namespace {

// The composite's loss and its gradient softmax - onehot(t) in fp32 (in place of the log-softmax).
CrossEntropyRows composite_fp32(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                                bool gradient) {
  const at::Tensor ignored = targets.eq(ignore_index);
  const at::Tensor index = targets.masked_fill(ignored, 0).unsqueeze(1);  // in range for gather; masked below
  // The logits in their dtype, then fp32, as cross_entropy on .to(kFloat) logits sees them (16-bit logits'
  // conversion reads padded rows where they lie; fp32 rows padded would be copied first).
  at::Tensor log_p = at::log_softmax(logits, 1, at::kFloat);
  CrossEntropyRows out;
  out.nll = log_p.gather(1, index).squeeze(1).neg().masked_fill_(ignored, 0);
  if (!gradient) return out;
  out.grad = log_p.exp_();
  out.grad.scatter_add_(1, index, at::full({logits.size(0), 1}, -1.0, out.grad.options()));
  return out;
}

}  // namespace

CrossEntropyRows cross_entropy_rows_composite(const at::Tensor& logits, const at::Tensor& targets,
                                              int64_t ignore_index, bool gradient) {
  CrossEntropyRows out = composite_fp32(logits, targets, ignore_index, gradient);
  if (gradient) out.grad = out.grad.to(logits.scalar_type());  // the same buffer when the logits are fp32
  return out;
}

CrossEntropyRows cross_entropy_rows_fused(at::Tensor logits, const at::Tensor& targets, int64_t ignore_index,
                                          bool gradient) {
  if (const std::string why = fused_refusal(logits, targets); !why.empty())
    throw InputError("the fused cross-entropy kernel does not apply: " + why);
#if SEGTRAIN_WITH_CUDA
  // Rows of unit stride however far apart (the head's padded buffer) are taken as they are.
  if (logits.stride(1) != 1 || (logits.size(0) > 1 && logits.stride(0) < logits.size(1))) logits = logits.contiguous();
  CrossEntropyRows out;
  out.nll = cross_entropy_cuda(logits, targets.contiguous(), ignore_index, gradient);
  if (gradient) out.grad = std::move(logits);
  return out;
#else
  (void)ignore_index;
  (void)gradient;
  return {};
#endif
}

bool cross_entropy_kernel_applies(const c10::Device& device, at::ScalarType logits) {
  return fused_kernels_requested() && device_refusal(device, logits).empty();
}

CrossEntropyRows cross_entropy_rows(at::Tensor logits, const at::Tensor& targets, int64_t ignore_index,
                                    bool gradient) {
  if (fused_kernels_requested() && fused_refusal(logits, targets).empty()) {
    record_path(ForwardPath::cross_entropy_fused);
    return cross_entropy_rows_fused(std::move(logits), targets, ignore_index, gradient);
  }
  record_path(ForwardPath::cross_entropy_composite);
  CrossEntropyRows out = composite_fp32(logits, targets, ignore_index, gradient);
  if (!gradient || (logits.scalar_type() == at::kFloat && logits.is_contiguous())) return out;
  // Into the logits' buffer, as the kernel writes it (the caller's GEMMs read its padded rows): the
  // one pass the cast to the logits' dtype would take.
  out.grad = logits.copy_(out.grad);
  return out;
}

}  // namespace segtrain::kernels
