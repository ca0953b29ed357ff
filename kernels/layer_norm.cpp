#include "kernels/layer_norm.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <string>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"

namespace segtrain::kernels {

namespace {

bool is_16bit(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

bool shares_dtype(const at::Tensor& parameter, const at::Tensor& x) {
  return !parameter.defined() || parameter.scalar_type() == x.scalar_type();
}

// Why layer_norm_16bit does not take these tensors ("" when it does).
std::string refusal_16bit(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!is_16bit(x.scalar_type()))
    return std::string("it takes a bf16 or fp16 x; got ") + c10::toString(x.scalar_type());
  if (!shares_dtype(weight, x) || !shares_dtype(bias, x))
    return std::string("it takes weight and bias in x's dtype (") + c10::toString(x.scalar_type()) + "); got " +
           (weight.defined() ? c10::toString(weight.scalar_type()) : "none") + " and " +
           (bias.defined() ? c10::toString(bias.scalar_type()) : "none");
  return "";
}

// A parameter read in x's dtype where it is narrower than x (see layer_norm in the header).
at::Tensor as_wide_as(const at::Tensor& parameter, const at::Tensor& x) {
  if (!parameter.defined() || c10::elementSize(parameter.scalar_type()) >= c10::elementSize(x.scalar_type()))
    return parameter;
  return parameter.to(x.scalar_type());
}

}  // namespace

at::Tensor layer_norm_16bit(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  if (const std::string why = refusal_16bit(x, weight, bias); !why.empty())
    throw InputError("LayerNorm in 16 bits does not apply: " + why);
  // Outside autocast: its policy would copy x to fp32 and return fp32.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return at::layer_norm(x, {x.size(-1)}, weight, bias, eps);
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                      NormReader reader) {
  if (reader == NormReader::matmul && fused_kernels_requested() && x.is_cuda() &&
      refusal_16bit(x, weight, bias).empty()) {
    record_path(ForwardPath::layer_norm_16bit);
    return layer_norm_16bit(x, weight, bias, eps);
  }
  at::Tensor y = at::layer_norm(x, {x.size(-1)}, as_wide_as(weight, x), as_wide_as(bias, x), eps);
  record_path(is_16bit(y.scalar_type()) ? ForwardPath::layer_norm_16bit : ForwardPath::layer_norm_fp32);
  return y;
}

}  // namespace segtrain::kernels
