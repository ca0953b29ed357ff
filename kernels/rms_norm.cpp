#include "kernels/rms_norm.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/version.h>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"

// ATen's fused RMSNorm with its CUDA kernel and (output, rstd) signature came with torch 2.9
// (2.8 had an MPS-only op of another signature); an older torch keeps the composite.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)
#define SEGTRAIN_HAS_FUSED_RMS_NORM 1
#else
#define SEGTRAIN_HAS_FUSED_RMS_NORM 0
#endif

namespace segtrain::kernels {

at::Tensor rms_norm_composite(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // The weight multiplies after the cast back, as transformers does.
  const auto dtype = x.scalar_type();
  auto h = x.to(at::kFloat);
  auto variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + eps);
  return weight * h.to(dtype);
}

at::Tensor rms_norm_fused(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!weight.defined() || weight.scalar_type() != x.scalar_type() || !kernel_dtype(x.scalar_type()))
    throw InputError(std::string("the fused RMSNorm takes x and weight of one floating dtype; got ") +
                     c10::toString(x.scalar_type()) + " and " +
                     (weight.defined() ? c10::toString(weight.scalar_type()) : "no weight"));
#if SEGTRAIN_HAS_FUSED_RMS_NORM
  // Outside autocast: its policy for the norms would run them in fp32 and return fp32.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return std::get<0>(at::_fused_rms_norm(x.contiguous(), {x.size(-1)}, weight, eps));
#else
  (void)eps;
  throw InputError("the torch segtrain was built against has no fused RMSNorm (torch 2.9 and later have it)");
#endif
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (SEGTRAIN_HAS_FUSED_RMS_NORM && fused_kernels_requested() && x.is_cuda() && weight.defined() && weight.scalar_type() == x.scalar_type() &&
      kernel_dtype(x.scalar_type())) {
    record_path(ForwardPath::rms_norm_fused);
    return rms_norm_fused(x, weight, eps);
  }
  record_path(ForwardPath::rms_norm_composite);
  return rms_norm_composite(x, weight, eps);
}

}  // namespace segtrain::kernels
