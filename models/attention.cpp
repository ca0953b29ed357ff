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
  // non_blocking: a blocking host-to-device copy would wait for the stream to drain.
  auto slopes_here = slopes.to(positions.device(), at::kFloat, /*non_blocking=*/true);
  auto bias = -slopes_here.view({1, -1, 1, 1}) * distance.unsqueeze(1);
  auto future = at::ones({t, t}, positions.options().dtype(at::kBool)).triu(1);
  return bias.masked_fill(future, -std::numeric_limits<float>::infinity());
}

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask) {
  // Fewer key/value heads than query heads: SDPA's own grouped-query attention
  // (the fused CPU and CUDA kernels take it without repeating k and v).
  const bool gqa = k.size(1) != q.size(1);
  if (!mask.defined())
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, std::nullopt, gqa);
  const auto device = q.device().type();
  if (!at::autocast::is_autocast_enabled(device))
    return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, std::nullopt, gqa);
  // Autocast would round the ALiBi bias to 16 bits (seed 002: positional math
  // stays fp32), so autocast is bypassed here and the mask kept fp32.
  const auto dtype = at::autocast::get_autocast_dtype(device);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  if (device == at::kCUDA) {
    // CUDA's fused kernel for an additive bias (memory-efficient attention)
    // takes the bias only in q's dtype: q/k/v go fp32 with the fp32 bias, and
    // the output returns to the autocast dtype for the projections after it.
    return at::scaled_dot_product_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), mask, 0.0, false,
                                           std::nullopt, gqa)
        .to(dtype);
  }
  // The CPU fused kernel takes 16-bit q/k/v with an fp32 bias.
  return at::scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), mask, 0.0, false, std::nullopt, gqa);
}

}  // namespace segtrain::models
