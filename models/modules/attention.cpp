#include "models/modules/attention.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <limits>
#include <optional>

#include "kernels/forward_paths.h"

namespace segtrain::models {

int64_t alibi_row_stride(int64_t length) {
  return (length + kAlibiBiasAlignment - 1) / kAlibiBiasAlignment * kAlibiBiasAlignment;
}

at::Tensor alibi_causal_mask(const at::Tensor& positions, const at::Tensor& slopes) {
  at::NoGradGuard no_grad;
  const int64_t b = positions.size(0), t = positions.size(1), h = slopes.size(0);
  const int64_t row = alibi_row_stride(t);
  auto pos = positions.to(at::kFloat);
  // One buffer, written in place: at long lengths the bias is the largest tensor of
  // the forward, and an out-of-place step would hold two of them at once.
  auto buffer = at::empty({b, h, t, row}, pos.options());
  // No kernel reads the padding columns; zeros (what PyTorch's own padding of a bias
  // holds) keep the buffer free of uninitialised memory.
  if (row > t) buffer.narrow(-1, t, row - t).zero_();
  auto bias = buffer.narrow(-1, 0, t);
  // non_blocking: a blocking host-to-device copy would wait for the stream to drain.
  const auto neg_slopes = slopes.to(positions.device(), at::kFloat, /*non_blocking=*/true).neg().view({1, h, 1, 1});
  // Head 0 first holds the distances p_i - p_j (differences of float positions are
  // exact up to 2^24, far past any context); the other heads scale them from there,
  // then head 0 its own.
  auto first = bias.narrow(1, 0, 1);
  at::sub_out(first, pos.reshape({b, 1, t, 1}), pos.reshape({b, 1, 1, t}));
  if (h > 1) {
    auto rest = bias.narrow(1, 1, h - 1);
    at::mul_out(rest, first, neg_slopes.narrow(1, 1, h - 1));
  }
  first.mul_(neg_slopes.narrow(1, 0, 1));
  auto future = at::ones({t, t}, positions.options().dtype(at::kBool)).triu(1);
  return bias.masked_fill_(future, -std::numeric_limits<float>::infinity());
}

at::Tensor causal_mask_after_read(const at::Tensor& q_positions, const at::Tensor& k_positions,
                                  const at::Tensor& slopes) {
  at::NoGradGuard no_grad;
  const int64_t b = q_positions.size(0), tq = q_positions.size(1), tk = k_positions.size(1);
  const auto index = q_positions.options().dtype(at::kLong);
  auto future = at::arange(tk, index).view({1, tk}) > at::arange(tk - tq, tk, index).view({tq, 1});  // [Tq, Tk]
  at::Tensor bias;
  if (slopes.defined()) {
    const int64_t h = slopes.size(0);
    const auto neg_slopes = slopes.to(q_positions.device(), at::kFloat, /*non_blocking=*/true).neg().view({1, h, 1, 1});
    bias = (q_positions.to(at::kFloat).view({b, 1, tq, 1}) - k_positions.to(at::kFloat).view({b, 1, 1, tk})) * neg_slopes;
  } else {
    bias = at::zeros({1, 1, tq, tk}, q_positions.options().dtype(at::kFloat));
  }
  return bias.masked_fill_(future, -std::numeric_limits<float>::infinity());
}

bool repeats_kv_heads(c10::DeviceType device, at::ScalarType compute_dtype, bool masked) {
  if (device != c10::DeviceType::CUDA) return false;
  // Measured with LibTorch 2.11 on an H200 (bench/gpu_sdpa_backends_bench.py): CUDA's flash and cuDNN
  // kernels take fewer key/value heads than query heads, but only in 16 bits and without a bias;
  // the memory-efficient kernel (fp32, or any additive bias) refuses them, which leaves the math
  // kernel and its B*H*T^2 scores: 85 GiB for 9 query heads at 32k in fp32, against 216 MB with
  // k and v repeated to the query heads (O(T) more memory, the fused kernel kept).
  return masked || compute_dtype == at::kFloat;
}

namespace {

// SDPA with k/v of H_kv <= H heads: SDPA's own grouped-query attention, or k and v repeated to
// q's heads where the fused kernel would not take them otherwise (repeats_kv_heads).
at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
                at::ScalarType compute_dtype) {
  const int64_t group = q.size(1) / k.size(1);
  const bool causal = !mask.defined();
  const auto bias = causal ? std::nullopt : std::optional<at::Tensor>(mask);
  if (group > 1 && repeats_kv_heads(q.device().type(), compute_dtype, !causal)) {
    kernels::record_path(kernels::ForwardPath::attention_kv_repeated);
    const auto kr = k.repeat_interleave(group, 1), vr = v.repeat_interleave(group, 1);
    kernels::record_sdpa(q, kr, vr, bias, causal, std::nullopt, false);
    return at::scaled_dot_product_attention(q, kr, vr, bias, 0.0, causal);
  }
  kernels::record_sdpa(q, k, v, bias, causal, std::nullopt, group > 1);
  return at::scaled_dot_product_attention(q, k, v, bias, 0.0, causal, std::nullopt, /*enable_gqa=*/group > 1);
}

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionBias& bias) {
  using kernels::ForwardPath;
  if (bias.folded.defined()) {
    kernels::record_path(ForwardPath::attention_alibi_folded);
    return folded_alibi_attention(q, k, v, bias.folded);
  }
  const at::Tensor& mask = bias.mask;
  const auto device = q.device().type();
  const bool autocast = at::autocast::is_autocast_enabled(device);
  // Without a mask the causal mask is implicit; under autocast SDPA runs in the autocast dtype.
  if (!mask.defined()) {
    kernels::record_path(ForwardPath::attention_causal);
    return sdpa(q, k, v, mask, autocast ? at::autocast::get_autocast_dtype(device) : q.scalar_type());
  }
  if (!autocast) {
    kernels::record_path(q.scalar_type() == at::kFloat ? ForwardPath::attention_bias_fp32 : ForwardPath::attention_bias_16bit);
    return sdpa(q, k, v, mask, q.scalar_type());
  }
  // Autocast would round the ALiBi bias to 16 bits (the ALiBi precision study: positional math
  // stays fp32), so autocast is bypassed here and the mask kept fp32.
  const auto dtype = at::autocast::get_autocast_dtype(device);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  if (device == at::kCUDA) {
    // CUDA's fused kernel for an additive bias (memory-efficient attention)
    // takes the bias only in q's dtype: q/k/v go fp32 with the fp32 bias, and
    // the output returns to the autocast dtype for the projections after it.
    kernels::record_path(ForwardPath::attention_bias_fp32);
    return sdpa(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), mask, at::kFloat).to(dtype);
  }
  // The CPU fused kernel takes 16-bit q/k/v with an fp32 bias.
  kernels::record_path(ForwardPath::attention_bias_16bit);
  return sdpa(q.to(dtype), k.to(dtype), v.to(dtype), mask, dtype);
}

}  // namespace segtrain::models
