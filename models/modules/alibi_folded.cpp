#include "models/modules/alibi_folded.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>

#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"

namespace segtrain::models {

FoldedAlibi fold_alibi(const at::Tensor& positions, const at::Tensor& slopes, int64_t head_dim,
                       at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  const int64_t h = slopes.size(0);
  const auto device = positions.device();
  // The slopes in SDPA's units (it multiplies q·k by 1/sqrt(head_dim)), split into a bf16
  // pair, which carries 16 significant bits of each in either storage.
  const auto scaled = slopes.to(device, at::kFloat, /*non_blocking=*/true) * std::sqrt(static_cast<double>(head_dim));
  const auto hi = scaled.to(at::kBFloat16).to(at::kFloat);
  const auto lo = (scaled - hi).to(at::kBFloat16).to(at::kFloat);
  const auto zeros = at::zeros_like(hi);
  auto q_dims = at::stack({hi * 65536.0, hi * 256.0, hi, lo * 65536.0, lo * 256.0, lo, zeros, zeros}, -1);
  // Digits of p - p_0, integer arithmetic (exact); p_0 on the device, so nothing is read back.
  const auto ids = positions.to(at::kLong);
  const auto p = ids - ids.narrow(1, 0, 1);
  const auto a = at::floor_divide(p, 65536), b = at::remainder(at::floor_divide(p, 256), 256),
             c = at::remainder(p, 256);
  const auto none = at::zeros_like(a);
  auto k_dims = at::stack({a, b, c, a, b, c, none, none}, -1).to(at::kFloat);
  return {q_dims.view({1, h, 1, kFoldedAlibiDims}).to(dtype), k_dims.unsqueeze(1).to(dtype)};
}

bool alibi_folds_within_precision(int64_t head_dim, const PositionBounds& bounds, double largest_slope) {
  const auto span = static_cast<double>(bounds.end - bounds.lowest);
  return head_dim + kFoldedAlibiDims <= 256 && span < static_cast<double>(kFoldedAlibiMaxSpan) &&
         largest_slope * span <= kFoldedAlibiMaxBias;
}

bool folds_alibi(const c10::Device& device, int64_t head_dim, const PositionBounds& bounds,
                 const at::Tensor& host_slopes) {
  if (!device.is_cuda() || !kernels::fused_kernels_requested()) return false;
  if (!at::autocast::is_autocast_enabled(device.type()) ||
      at::autocast::get_autocast_dtype(device.type()) != at::kBFloat16)
    return false;
  if (!host_slopes.is_cpu() || host_slopes.numel() == 0) return false;
  const auto values = host_slopes.to(at::kFloat).contiguous();
  const float* slopes = values.const_data_ptr<float>();
  const double largest = *std::max_element(slopes, slopes + values.numel());
  return alibi_folds_within_precision(head_dim, bounds, largest);
}

at::Tensor folded_alibi_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const FoldedAlibi& folded) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3), h_kv = k.size(1);
  const auto device = q.device().type();
  // The dtype SDPA computes in: autocast's, or q's own.
  const auto dtype = at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device)
                                                                : q.scalar_type();
  auto qx = at::cat({q.to(dtype), folded.q_dims.to(dtype).expand({b, h, t, kFoldedAlibiDims})}, -1);
  auto kx = at::cat({k.to(dtype), folded.k_dims.to(dtype).expand({b, h_kv, t, kFoldedAlibiDims})}, -1);
  // Flash takes one head size for q, k and v: v's extra dimensions are zeros, cut from the output.
  auto vx = at::constant_pad_nd(v.to(dtype), {0, kFoldedAlibiDims});
  kernels::record_sdpa(qx, kx, vx, std::nullopt, true, 1.0 / std::sqrt(static_cast<double>(hd)), h_kv < h);
  auto y = at::scaled_dot_product_attention(qx, kx, vx, std::nullopt, 0.0, /*is_causal=*/true,
                                            /*scale=*/1.0 / std::sqrt(static_cast<double>(hd)),
                                            /*enable_gqa=*/h_kv < h);
  return y.narrow(-1, 0, hd);
}

}  // namespace segtrain::models
