#include "models/attention.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <limits>

namespace segtrain::models {

at::Tensor alibi_causal_mask(const at::Tensor& positions, const at::Tensor& slopes) {
  at::NoGradGuard no_grad;
  const int64_t t = positions.size(1);
  auto pos = positions.to(at::kFloat);
  // Differences of float positions are exact up to 2^24, far past any context.
  auto distance = pos.unsqueeze(2) - pos.unsqueeze(1);                      // [B, T, T]
  auto bias = -slopes.to(positions.device(), at::kFloat).view({1, -1, 1, 1}) * distance.unsqueeze(1);
  auto future = at::ones({t, t}, positions.options().dtype(at::kBool)).triu(1);
  return bias.masked_fill(future, -std::numeric_limits<float>::infinity());
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  if (!mask.defined()) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  const auto device = q.device().type();
  if (!at::autocast::is_autocast_enabled(device)) return at::scaled_dot_product_attention(q, k, v, mask);
  // Autocast would round the ALiBi bias to 16 bits; cast q/k/v ourselves and
  // keep the mask fp32, which the fused kernels accept.
  const auto dtype = at::autocast::get_autocast_dtype(device);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return at::scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask);
}

}  // namespace segtrain::models
