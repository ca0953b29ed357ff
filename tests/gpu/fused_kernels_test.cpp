// The GPU suite (gpu/gpu_suite.h): the project's CUDA kernels (kernels/) against ATen's composites.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <tuple>
#if SEGTRAIN_WITH_CUDA
// CMake defines SEGTRAIN_WITH_CUDA for CUDA builds of LibTorch (cmake/SegtrainTorch.cmake).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "gpu/gpu_suite.h"
#include "kernels/bias_gradient_plan.h"
#include "kernels/cross_entropy.h"
#include "kernels/fused_kernels.h"
#include "kernels/layer_norm.h"
#include "kernels/linear.h"
#include "kernels/residual_norm.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "models/modules/alibi_folded.h"
#include "models/modules/attention.h"
#include "models/modules/lm_head_loss.h"
#include "models/modules/positions.h"
#include "test_util.h"
#include "trainer/runtime/device.h"

namespace segtrain {
namespace {

using test::device_under_test;
using test::record;

// ---------------------------------------------------------------------------
// The project's CUDA kernels (kernels/) against the ATen composites they replace.

// The RoPE kernel and its gradient's against kernels::rope_composite: fp32, bf16 and fp16 q,
// whole and partial rotation (GPT-NeoX's rotary_pct), angles per sample and shared by the batch,
// q as the blocks hand it over (a transposed view), a strided upstream gradient; with autocast
// off (the composite's fp32 result) and on (x's dtype, the fp32 value rounded once).
TEST(FusedKernels, RopeEqualsTheCompositeForwardAndBackward) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the RoPE kernel is CUDA's; tests/models/rope_test.cpp checks its arithmetic on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  struct Shape {
    int64_t b, h, t, d, rd;
    bool shared;
  };
  double worst_forward = 0, worst_backward = 0;
  for (const Shape s : {Shape{2, 4, 64, 64, 64, false}, Shape{2, 4, 33, 32, 8, false}, Shape{3, 2, 17, 16, 16, true}})
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
      for (const bool autocast : {false, true}) {
        if (autocast && dtype == at::kFloat) continue;
        at::manual_seed(11);
        const auto positions = at::randint(0, 65536, {s.shared ? 1 : s.b, s.t}, cuda.dtype(at::kLong));
        auto inv_freq = 1.0 / at::pow(10000.0, at::arange(0, s.rd, 2, cuda.dtype(at::kFloat)) / s.rd);
        auto freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.view({1, 1, -1});
        auto angles = at::cat({freqs, freqs}, -1).unsqueeze(1);
        const auto cos = angles.cos(), sin = angles.sin();
        auto x = at::randn({s.b, s.t, s.h, s.d}, cuda).to(dtype).transpose(1, 2).requires_grad_();
        const auto autocast_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
        at::autocast::set_autocast_enabled(at::kCUDA, autocast);
        if (autocast) at::autocast::set_autocast_dtype(at::kCUDA, dtype);
        const auto want = kernels::rope_composite(x, cos, sin);
        const auto got = kernels::rope_fused(x, cos, sin);
        at::autocast::set_autocast_enabled(at::kCUDA, false);
        at::autocast::set_autocast_dtype(at::kCUDA, autocast_dtype);
        const auto what = std::string(c10::toString(dtype)) + (autocast ? " autocast" : "") + " rd " +
                          std::to_string(s.rd) + (s.shared ? " shared" : "");
        ASSERT_EQ(got.scalar_type(), autocast ? dtype : want.scalar_type()) << what;
        ASSERT_EQ(got.sizes(), want.sizes()) << what;
        const double tol = got.scalar_type() == at::kFloat ? 1e-5 : (got.scalar_type() == at::kHalf ? 1e-3 : 8e-3);
        const auto forward_error = (got.to(at::kFloat) - want.detach().to(got.scalar_type()).to(at::kFloat)).abs();
        worst_forward = std::max(worst_forward, forward_error.max().item<double>());
        EXPECT_TRUE(at::allclose(got.to(at::kFloat), want.detach().to(got.scalar_type()).to(at::kFloat), tol, 1e-5))
            << what << ": largest difference " << forward_error.max().item<double>();

        // An upstream gradient with a strided last dimension, in the output's dtype. The kernel's
        // gradient is the fp32 composite's of the same upstream rounded once to x's dtype (a bf16
        // composite rounds each term of its gradient before summing them: not the reference).
        auto upstream = at::randn({s.b, s.h, s.d, s.t}, cuda).transpose(2, 3).to(got.scalar_type());
        auto x32 = x.detach().to(at::kFloat).requires_grad_();
        auto grad_want =
            torch::autograd::grad({kernels::rope_composite(x32, cos, sin)}, {x32}, {upstream.to(at::kFloat)})[0];
        auto grad_got = torch::autograd::grad({got}, {x}, {upstream})[0];
        ASSERT_EQ(grad_got.scalar_type(), dtype) << what;
        const auto rounded = grad_want.to(dtype).to(at::kFloat);
        const auto backward_error = (grad_got.to(at::kFloat) - rounded).abs();
        worst_backward = std::max(worst_backward, backward_error.max().item<double>());
        const double grad_tol = dtype == at::kFloat ? 1e-5 : (dtype == at::kHalf ? 1e-3 : 8e-3);
        EXPECT_TRUE(at::allclose(grad_got.to(at::kFloat), rounded, grad_tol, 1e-5))
            << what << ": largest gradient difference " << backward_error.max().item<double>();
      }
  record("fused rope vs composite: largest |difference| forward " + std::to_string(worst_forward) + ", backward " +
         std::to_string(worst_backward));
}

// ATen's fused RMSNorm (kernels/rms_norm.h) against transformers' composite on the GPU: fp32,
// bf16 and fp16 rows of Llama-3-8B's width and of a head (Qwen3's q and k norms), inside autocast
// as a bf16 run calls it, forward and the gradients of x and weight against the fp32 composite's.
TEST(FusedKernels, RmsNormEqualsTheCompositeForwardAndBackward) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the fused RMSNorm is CUDA's; tests/models/rms_norm_test.cpp checks the op on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  double worst_forward = 0, worst_backward = 0;
  for (const int64_t width : {int64_t{4096}, int64_t{128}})
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      at::manual_seed(13);
      auto x = (at::randn({2, 37, width}, cuda) * 3.0).to(dtype).requires_grad_();
      auto w = (at::rand({width}, cuda) + 0.5).to(dtype).requires_grad_();
      // Inside autocast in the tensors' own 16-bit dtype, as a run calls it; the op leaves autocast out.
      const auto autocast_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
      at::autocast::set_autocast_enabled(at::kCUDA, dtype != at::kFloat);
      if (dtype != at::kFloat) at::autocast::set_autocast_dtype(at::kCUDA, dtype);
      const auto got = kernels::rms_norm_fused(x, w, 1e-5);
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::set_autocast_dtype(at::kCUDA, autocast_dtype);
      const auto what = std::string(c10::toString(dtype)) + " width " + std::to_string(width);
      ASSERT_EQ(got.scalar_type(), dtype) << what;
      auto x32 = x.detach().to(at::kFloat).requires_grad_();
      auto w32 = w.detach().to(at::kFloat).requires_grad_();
      const auto want = kernels::rms_norm_composite(x32, w32, 1e-5);
      const double tol = dtype == at::kFloat ? 1e-5 : (dtype == at::kHalf ? 2e-3 : 1.6e-2);
      const auto forward_error = (got.to(at::kFloat) - want.detach()).abs();
      worst_forward = std::max(worst_forward, forward_error.max().item<double>());
      EXPECT_TRUE(at::allclose(got.to(at::kFloat), want.detach(), tol, 1e-4))
          << what << ": largest difference " << forward_error.max().item<double>();
      const auto upstream = at::randn(got.sizes(), cuda).to(dtype);
      const auto grads_got = torch::autograd::grad({got}, {x, w}, {upstream});
      const auto grads_want = torch::autograd::grad({want}, {x32, w32}, {upstream.to(at::kFloat)});
      for (size_t i = 0; i < 2; ++i) {
        ASSERT_EQ(grads_got[i].scalar_type(), dtype) << what;
        const auto scale = grads_want[i].abs().max().item<double>();
        const auto backward_error = (grads_got[i].to(at::kFloat) - grads_want[i]).abs().max().item<double>();
        worst_backward = std::max(worst_backward, backward_error / scale);
        EXPECT_LE(backward_error, (dtype == at::kFloat ? 1e-5 : 2e-2) * scale)
            << what << (i == 0 ? " d x" : " d weight") << ": largest difference " << backward_error;
      }
    }
  record("fused rms_norm vs composite: largest |difference| forward " + std::to_string(worst_forward) +
         ", backward (relative to the largest gradient) " + std::to_string(worst_backward));
}

// LayerNorm in 16 bits outside autocast (kernels/layer_norm.h) against what autocast computes for
// the same bf16 or fp16 x, weight and bias (its fp32 result, which the next op rounds): GPT-2
// medium's width and a small one, under autocast in the tensors' dtype as a run calls it; each
// value within one unit in the last place of the rounded fp32 result, the gradients of x, weight
// and bias within two units of the largest (autocast's rounded to their dtype by its casts' backward).
TEST(FusedKernels, LayerNormIn16BitsIsAutocastsFp32ResultRounded) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("autocast's fp32 LayerNorm is CUDA's; tests/models/layer_norm_test.cpp checks the call on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  double worst_forward = 0, worst_backward = 0;
  for (const int64_t width : {int64_t{1024}, int64_t{96}})
    for (const auto dtype : {at::kBFloat16, at::kHalf}) {
      at::manual_seed(19);
      auto x = (at::randn({4, 33, width}, cuda) * 3.0 + 1.0).to(dtype).requires_grad_();
      auto w = (at::rand({width}, cuda) + 0.5).to(dtype).requires_grad_();
      auto b = at::randn({width}, cuda).to(dtype).requires_grad_();
      const auto autocast_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
      at::autocast::set_autocast_enabled(at::kCUDA, true);
      at::autocast::set_autocast_dtype(at::kCUDA, dtype);
      const auto got = kernels::layer_norm_16bit(x, w, b, 1e-5);
      const auto want = at::layer_norm(x, {width}, w, b, 1e-5);  // autocast's policy: fp32
      at::autocast::set_autocast_enabled(at::kCUDA, false);
      at::autocast::set_autocast_dtype(at::kCUDA, autocast_dtype);
      const auto what = std::string(c10::toString(dtype)) + " width " + std::to_string(width);
      ASSERT_EQ(got.scalar_type(), dtype) << what;
      ASSERT_EQ(want.scalar_type(), at::kFloat) << what;
      const double unit = dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
      const auto rounded = want.detach().to(dtype).to(at::kDouble);
      const auto forward_error = (got.to(at::kDouble) - rounded).abs();
      worst_forward = std::max(worst_forward, (forward_error / (rounded.abs() + 1e-7)).max().item<double>());
      EXPECT_TRUE(at::le(forward_error, rounded.abs() * unit * 2 + 1e-7).all().item<bool>()) << what;
      const auto upstream = at::randn(got.sizes(), cuda).to(dtype);
      const auto grads_got = torch::autograd::grad({got}, {x, w, b}, {upstream});
      const auto grads_want = torch::autograd::grad({want}, {x, w, b}, {upstream.to(at::kFloat)});
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(grads_got[i].scalar_type(), dtype) << what << " " << i;
        const auto reference = grads_want[i].to(at::kDouble);
        const double error = (grads_got[i].to(at::kDouble) - reference).abs().max().item<double>() /
                             reference.abs().max().item<double>();
        worst_backward = std::max(worst_backward, error);
        EXPECT_LE(error, 2 * unit) << what << (i == 0 ? " d x" : i == 1 ? " d weight" : " d bias");
      }
    }
  record("LayerNorm 16-bit vs autocast's fp32 rounded: largest relative difference forward " +
         std::to_string(worst_forward) + ", backward (of the largest gradient) " + std::to_string(worst_backward));
}

// The SwiGLU kernels (kernels/swiglu.h) against ATen's composite on the same CUDA tensors: fp32,
// bf16 and fp16, Llama-3-8B's d_ff (14,336), a size that leaves a tail after the 16-byte packs and
// one larger than a grid,
// a gate that starts off a 16-byte boundary (copied to one), under autocast as a run calls it;
// the value and both gradients within three units in the last place (the composite rounds
// silu(g) and d * u on the way), and of the largest gradient near 0.
TEST(FusedKernels, SwigluEqualsTheCompositeForwardAndBackward) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the SwiGLU kernels are CUDA's; tests/models/swiglu_test.cpp checks their arithmetic on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  double worst = 0;
  // [1,100 x 8,193]: more packs than one grid's threads (the loops stride), and a tail.
  for (const auto& [rows, width] : std::vector<std::pair<int64_t, int64_t>>{{5, 14336}, {5, 333}, {1100, 8193}})
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
      for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
        at::manual_seed(23);
        const auto gate_storage = (at::randn({rows * width + 1}, cuda) * 4.0).to(dtype);
        const auto up_values = at::randn({rows, width}, cuda).to(dtype);
        const auto grad = at::randn({rows, width}, cuda).to(dtype);
        const auto what = std::string(c10::toString(dtype)) + " " + std::to_string(rows) + " x " +
                          std::to_string(width) + (offset ? ", gate off a 16-byte boundary" : "");
        // The kernels' inputs: gate a contiguous view `offset` elements into its storage (a leaf holds it).
        auto gate_leaf = gate_storage.clone().requires_grad_();
        const auto gate_of = [&](const at::Tensor& flat) {
          return flat.narrow(0, offset, rows * width).view({rows, width});
        };
        auto up = up_values.clone().requires_grad_();
        const auto autocast_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
        at::autocast::set_autocast_enabled(at::kCUDA, dtype != at::kFloat);
        if (dtype != at::kFloat) at::autocast::set_autocast_dtype(at::kCUDA, dtype);
        const auto got = kernels::swiglu_fused(gate_of(gate_leaf), up);
        at::autocast::set_autocast_enabled(at::kCUDA, false);
        at::autocast::set_autocast_dtype(at::kCUDA, autocast_dtype);
        ASSERT_EQ(got.scalar_type(), dtype) << what;
        const auto got_grads = torch::autograd::grad({got}, {gate_leaf, up}, {grad});
        auto gate_ref = gate_of(gate_storage).clone().requires_grad_();
        auto up_ref = up_values.clone().requires_grad_();
        const auto want = kernels::swiglu_composite(gate_ref, up_ref);
        const auto want_grads = torch::autograd::grad({want}, {gate_ref, up_ref}, {grad});
        const double unit = dtype == at::kFloat ? 8 * std::ldexp(1.0, -23)
                            : dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
        const std::vector<std::pair<at::Tensor, at::Tensor>> pairs = {
            {got.detach(), want.detach()},
            {gate_of(got_grads[0]), want_grads[0]},
            {got_grads[1], want_grads[1]}};
        for (size_t i = 0; i < pairs.size(); ++i) {
          const auto a = pairs[i].first.to(at::kDouble), b = pairs[i].second.to(at::kDouble);
          const auto error = (a - b).abs();
          const auto bound = (b.abs() + b.abs().max()) * 3 * unit;
          worst = std::max(worst, (error / (b.abs().max() * unit)).max().item<double>());
          EXPECT_FALSE((error > bound).any().item<bool>())
              << what << (i == 0 ? " value" : i == 1 ? " d gate" : " d up") << ": largest difference "
              << error.max().item<double>();
        }
        if (offset) {  // the element before the view takes no gradient
          EXPECT_EQ(got_grads[0][0].item<double>(), 0.0) << what;
        }
      }
  record("fused SwiGLU vs composite: largest difference " + std::to_string(worst) +
         " units in the last place of the largest value");
}

// The LM head's cross-entropy kernel (kernels/cross_entropy.h) against ATen's composite on the
// same CUDA logits: fp32, bf16 and fp16 rows of GPT-2's, Llama-3's and a small vocabulary, two
// targets ignored; the loss within fp32 rounding, the gradient (written over the logits) the
// composite's fp32 value rounded once to the logits' dtype, zero on the ignored rows; rows in a
// padded buffer taken where they lie.
TEST(FusedKernels, CrossEntropyEqualsTheCompositeLossAndGradient) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the cross-entropy kernel is CUDA's; tests/models/cross_entropy_test.cpp checks its arithmetic on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const int64_t ignore = -100, rows = 67;
  double worst_loss = 0, worst_gradient = 0;
  for (const int64_t vocab : {int64_t{50257}, int64_t{128256}, int64_t{1000}})
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      at::manual_seed(17);
      const auto logits = (at::randn({rows, vocab}, cuda) * 4.0).to(dtype);
      auto targets = at::randint(0, vocab, {rows}, cuda.dtype(at::kLong));
      targets.index_put_({at::tensor({int64_t{0}, int64_t{40}}, cuda.dtype(at::kLong))}, ignore);
      const auto what = std::string(c10::toString(dtype)) + " vocab " + std::to_string(vocab);
      const auto want = kernels::cross_entropy_rows_composite(logits, targets, ignore, true);
      const auto got = kernels::cross_entropy_rows_fused(logits.clone(), targets, ignore, true);
      const auto loss_only = kernels::cross_entropy_rows_fused(logits.clone(), targets, ignore, false);
      ASSERT_EQ(got.nll.scalar_type(), at::kFloat) << what;
      ASSERT_EQ(got.grad.scalar_type(), dtype) << what;
      EXPECT_TRUE(at::equal(got.nll, loss_only.nll)) << what;
      // The same rows in a buffer padded as the LM head's (models/modules/lm_head_loss.h): read where
      // they lie, the gradient written there (no copy), the padding left alone.
      auto padded = at::full({rows, vocab + 64}, 5.0, cuda.dtype(dtype));
      padded.narrow(1, 0, vocab).copy_(logits);
      const auto in_buffer = kernels::cross_entropy_rows_fused(padded.narrow(1, 0, vocab), targets, ignore, true);
      EXPECT_EQ(in_buffer.grad.data_ptr(), padded.data_ptr()) << what;
      EXPECT_TRUE(at::equal(in_buffer.nll, got.nll)) << what;
      EXPECT_TRUE(at::equal(in_buffer.grad, got.grad)) << what;
      EXPECT_TRUE(at::equal(padded.narrow(1, vocab, 64), at::full({rows, 64}, 5.0, cuda.dtype(dtype)))) << what;
      const double loss_error = (got.nll - want.nll).abs().max().item<double>();
      worst_loss = std::max(worst_loss, loss_error);
      EXPECT_LE(loss_error, 2e-6 * want.nll.abs().max().item<double>()) << what;
      const auto kept = targets.ne(ignore).unsqueeze(1);
      const auto g = got.grad.to(at::kFloat), w = want.grad.to(at::kFloat).masked_fill(kept.logical_not(), 0);
      EXPECT_EQ(g.masked_select(kept.logical_not()).abs().max().item<float>(), 0.0f) << what;
      const double gradient_error = (g - w).abs().max().item<double>();
      worst_gradient = std::max(worst_gradient, gradient_error);
      EXPECT_TRUE(at::allclose(g, w, dtype == at::kFloat ? 1e-4 : (dtype == at::kHalf ? 1e-3 : 1.0 / 128), 1e-7))
          << what << ": largest difference " << gradient_error;
    }
  record("fused cross-entropy vs composite: largest |difference| loss " + std::to_string(worst_loss) + ", gradient " +
         std::to_string(worst_gradient));
}

// The head's auto slices on CUDA are sized by the buffers the cross-entropy kernel makes (one 16-bit
// row a token, models/modules/lm_head_loss.h): GPT-2 medium's trained bf16 head takes slices of 4 D =
// 4,096 tokens where the composite's fp32 buffers take D = 1,024; fp32 logits keep the composite's rule.
TEST(FusedKernels, HeadSlicesOnCudaAreSizedByTheKernelsBuffers) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the cross-entropy kernel is CUDA's; tests/models/lm_head_loss_test.cpp checks the sizes");
  if (!kernels::fused_kernels_requested()) SKIP_NOT_APPLICABLE("SEGTRAIN_FUSED_KERNELS=0 keeps the composites");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const auto weight = at::empty({50257, 1024}, cuda.dtype(at::kBFloat16)).requires_grad_();
  const auto hidden = at::empty({8, 1024}, cuda.dtype(at::kBFloat16));
  EXPECT_EQ(models::loss_chunk_tokens_for(std::nullopt, hidden, weight), 4096);
  EXPECT_EQ(models::loss_chunk_tokens_for(std::nullopt, hidden, weight.detach()), 1920);  // frozen: 192 MiB
  const auto fp32_weight = at::empty({50257, 1024}, cuda).requires_grad_();
  EXPECT_EQ(models::loss_chunk_tokens_for(std::nullopt, hidden.to(at::kFloat), fp32_weight), 1024);
  {
    trainer::Autocast autocast(/*enabled=*/true, at::kCUDA);  // fp32 weights under bf16 autocast: 16-bit logits
    EXPECT_EQ(models::loss_chunk_tokens_for(std::nullopt, hidden.to(at::kFloat), fp32_weight), 4096);
  }
}

// ALiBi folded into q·k (models/modules/alibi_folded.h) on CUDA under bf16 autocast, BLOOM's
// head shape (64), segmented positions spanning 60,000 and slopes of a run interpolated 16x:
// the folded tensors go to a fused 16-bit kernel (flash or cuDNN, not the math fallback), and
// the output and the gradients of q, k and v stay within bf16 of attention in fp32 with the fp32
// bias tensor on the same bf16-rounded inputs.
TEST(FusedKernels, FoldedAlibiTakesAFused16BitKernelAndMatchesTheFp32Bias) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the folded bias is for CUDA's flash kernel; tests/models/alibi_folded_test.cpp checks it on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const int64_t b = 2, h = 16, t = 512, d = 64;
  at::manual_seed(19);
  // Four chunks of 128 tokens a sample, at their original positions in a 60,000-token window.
  auto starts = std::get<0>(at::randint(0, 60000 - 128, {b, 4}, cuda.dtype(at::kLong)).sort(-1));
  auto positions = (starts.unsqueeze(-1) + at::arange(128, cuda.dtype(at::kLong))).view({b, t});
  const auto bounds = models::PositionBounds::of(positions.cpu());
  const auto slopes = models::alibi_slopes(h).to(at::kCUDA) / 16.0;
  auto q = at::randn({b, h, t, d}, cuda).to(at::kBFloat16).requires_grad_();
  auto k = at::randn({b, h, t, d}, cuda).to(at::kBFloat16).requires_grad_();
  auto v = at::randn({b, h, t, d}, cuda).to(at::kBFloat16).requires_grad_();
  const auto folded = models::fold_alibi(positions, slopes, d, at::kBFloat16);
  const int64_t backend = at::_fused_sdp_choice(at::zeros({b, h, t, d + models::kFoldedAlibiDims}, cuda.dtype(at::kBFloat16)),
                                                at::zeros({b, h, t, d + models::kFoldedAlibiDims}, cuda.dtype(at::kBFloat16)),
                                                at::zeros({b, h, t, d + models::kFoldedAlibiDims}, cuda.dtype(at::kBFloat16)),
                                                std::nullopt, 0.0, true, 1.0 / 8.0, false);
  // at::SDPBackend: 1 flash, 3 cuDNN (0 math, 2 memory-efficient).
  EXPECT_TRUE(backend == 1 || backend == 3) << "SDPA backend " << backend;
  const auto autocast_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  // The model folds this batch where the switch is on (slope 2^-0.5 / 16 times a span under 60,000).
  const bool folds = models::folds_alibi(c10::Device(at::kCUDA), d, bounds, models::alibi_slopes(h) / 16.0);
  const auto got = models::folded_alibi_attention(q, k, v, folded);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::set_autocast_dtype(at::kCUDA, autocast_dtype);
  EXPECT_EQ(folds, kernels::fused_kernels_requested());
  ASSERT_EQ(got.scalar_type(), at::kBFloat16);
  auto q32 = q.detach().to(at::kFloat).requires_grad_(), k32 = k.detach().to(at::kFloat).requires_grad_(),
       v32 = v.detach().to(at::kFloat).requires_grad_();
  const auto want = models::causal_attention(q32, k32, v32, models::alibi_causal_mask(positions, slopes));
  const double forward_error = (got.to(at::kFloat) - want.detach()).abs().max().item<double>();
  EXPECT_LT(forward_error, 3e-2);
  const auto upstream = at::randn(got.sizes(), cuda);
  const auto g = torch::autograd::grad({got}, {q, k, v}, {upstream.to(at::kBFloat16)});
  const auto w = torch::autograd::grad({want}, {q32, k32, v32}, {upstream});
  double worst_backward = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double scale = w[i].abs().max().item<double>();
    const double error = (g[i].to(at::kFloat) - w[i]).abs().max().item<double>();
    worst_backward = std::max(worst_backward, error / scale);
    EXPECT_LE(error, 3e-2 * scale) << "gradient " << i;
  }
  record("folded alibi vs fp32 bias: SDPA backend " + std::to_string(backend) + ", largest |difference| forward " +
         std::to_string(forward_error) + ", backward (relative) " + std::to_string(worst_backward));
}

// The linears' bias-gradient kernels (kernels/linear.h, SEGTRAIN_FUSED_KERNELS=all until these pass on a
// GPU) against ATen's linear and gelu on the same CUDA leaves: fp32, bf16 and fp16; GPT-2 medium's qkv
// projection on half a micro-batch (4,096 tokens, 1,024 -> 3,072: 16-byte packs) and a width that takes
// one column a thread (333); the plain projection and GELU's two approximations. The output and the
// input's and weight's gradients are ATen's own GEMMs (within a unit of the largest value); the bias's
// gradient is within fp32 rounding of ATen's sum (the kernels add in another order), and, with GELU, of
// the sum of ATen's GELU gradient (rounded once as the kernel rounds it).
TEST(FusedKernels, LinearBiasGradientsEqualAtensLinearAndGelu) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the bias-gradient kernels are CUDA's; tests/models/linear_test.cpp checks their arithmetic on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  double worst_gemm = 0, worst_bias = 0;
  for (const auto& [tokens, in, out] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{4096, 1024, 3072}, {21, 64, 333}})
    for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
      for (const int gelu : {0, 1, 2}) {  // none, tanh, erf
        at::manual_seed(31);
        const auto x0 = at::randn({2, tokens / 2 + (tokens % 2), in}, cuda).to(dtype);
        const auto w0 = (at::randn({out, in}, cuda) / std::sqrt(static_cast<double>(in))).to(dtype);
        const auto b0 = (at::randn({out}, cuda) * 0.1).to(dtype);
        const auto upstream = at::randn({x0.size(0), x0.size(1), out}, cuda).to(dtype);
        const std::string what = std::string(c10::toString(dtype)) + " " + std::to_string(in) + " -> " +
                                 std::to_string(out) + (gelu == 0 ? "" : gelu == 1 ? ", GELU tanh" : ", GELU erf");
        auto run = [&](bool fused) {
          auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
          at::Tensor y = fused ? (gelu == 0 ? kernels::linear_fused(x, w, b) : kernels::linear_gelu_fused(x, w, b, gelu == 1))
                               : at::linear(x, w, b);
          if (!fused && gelu != 0) y = at::gelu(y, gelu == 1 ? "tanh" : "none");
          const auto g = torch::autograd::grad({y}, {x, w, b}, {upstream});
          return std::vector<at::Tensor>{y.detach(), g[0], g[1], g[2]};
        };
        const auto got = run(true), want = run(false);
        const double unit = dtype == at::kFloat ? std::ldexp(1.0, -23)
                            : dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
        const char* names[] = {"output", "d x", "d W"};
        for (int i = 0; i < 3; ++i) {
          ASSERT_EQ(got[i].scalar_type(), dtype) << what << " " << names[i];
          const auto a = got[i].to(at::kDouble), e = want[i].to(at::kDouble);
          const double largest = e.abs().max().item<double>(), error = (a - e).abs().max().item<double>();
          worst_gemm = std::max(worst_gemm, error / (largest * unit));
          // The same GEMMs on the same operands; d x and d W read GELU's gradient, which may round apart by a unit.
          EXPECT_LE(error, largest * unit * (gelu == 0 ? 1 : 4)) << what << " " << names[i];
        }
        // d b: the sums of the rows in fp32 (with GELU, its gradient as the kernel rounds it, each row within a
        // unit of ATen's gelu_backward), within the rounding of the kernel's chains of additions (a thread's
        // rows, a block's 8, the splits: at most 128 on a GPU of up to 132 multiprocessors) of the sum in double.
        at::Tensor rows = upstream.reshape({-1, out});
        if (gelu != 0) {
          const auto pre = at::addmm(b0, x0.reshape({-1, in}), w0.t());  // as the node computes it
          const char* approximate = gelu == 1 ? "tanh" : "none";
          const auto kernel = kernels::gelu_bias_gradient(pre, rows.contiguous(), gelu == 1);
          const auto aten = at::gelu_backward(rows, pre, approximate).to(at::kDouble);
          const auto apart = (kernel.first.to(at::kDouble) - aten).abs();
          const auto row_bound = aten.abs() * 2 * unit + rows.to(at::kDouble).abs() * 16 * std::ldexp(1.0, -23);
          EXPECT_FALSE((apart > row_bound).any().item<bool>())
              << what << " GELU's gradient: largest difference from ATen's " << apart.max().item<double>();
          EXPECT_TRUE(at::equal(kernel.second, got[3])) << what << ": the node's d b is not the kernel's";
          rows = kernel.first;
        }
        const auto d = rows.to(at::kDouble), exact = d.sum(0);
        const auto bound = d.abs().sum(0) * (static_cast<double>(tokens) / 8 + 8 + 128) * std::ldexp(1.0, -24) +
                           exact.abs() * 2 * unit;
        ASSERT_EQ(got[3].scalar_type(), dtype) << what;
        const auto error = (got[3].to(at::kDouble) - exact).abs();
        worst_bias = std::max(worst_bias, ((got[3].to(at::kDouble) - want[3].to(at::kDouble)).abs() /
                                           (want[3].to(at::kDouble).abs() + 1e-6)).max().item<double>());
        EXPECT_FALSE((error > bound).any().item<bool>())
            << what << " d b: largest difference " << error.max().item<double>() << " from the sum in double";
      }
  record("bias-gradient kernels vs ATen: GEMMs within " + std::to_string(worst_gemm) +
         " units of the largest value; d b within " + std::to_string(worst_bias) + " of ATen's (relative)");
}

// The column-sum kernel at sizes its split meets: more splits than rows a block (100,003 rows, the last
// split short), fewer rows than a block's threads, GPT-2 medium's fc width, a gradient off a 16-byte
// boundary (one column a thread), fp32 and bf16. The values are small integers, whose sums every order of
// addition gets exactly in fp32 (below 2^24): each column's sum must be the exact sum rounded once to
// the dtype, so a row missed or added twice shows; and the same bits twice.
TEST(FusedKernels, ColumnSumsCoverEveryRowAtAnySizeAndRepeatBitForBit) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the column-sum kernel is CUDA's; tests/models/linear_test.cpp replays its order on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& [rows, cols, offset] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {100003, 8, 0}, {5, 12, 0}, {8192, 4096, 0}, {777, 40, 1}})
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      at::manual_seed(32);
      const auto storage = at::randint(-4, 5, {rows * cols + offset}, cuda).to(dtype);
      const auto g = storage.narrow(0, offset, rows * cols).view({rows, cols});
      const std::string what = std::string(c10::toString(dtype)) + " " + std::to_string(rows) + " x " +
                               std::to_string(cols) + (offset ? ", off a 16-byte boundary" : "");
      const auto sums = kernels::bias_gradient(g), again = kernels::bias_gradient(g);
      ASSERT_EQ(sums.scalar_type(), dtype) << what;
      EXPECT_TRUE(at::equal(sums, again)) << what << ": not the same bits twice";
      const auto exact = g.to(at::kDouble).sum(0).to(dtype);
      EXPECT_TRUE(at::equal(sums, exact)) << what << ": largest difference "
                                          << (sums.to(at::kDouble) - exact.to(at::kDouble)).abs().max().item<double>();
    }
}

// The residual add fused with LayerNorm and with RMSNorm (kernels/residual_norm.h), forward and every
// gradient, against the norm of the rounded sum and its gradients in double (autograd), and LayerNorm's
// also against ATen's add and LayerNorm in the same dtype; at GPT-2 medium's 8,192 x 1,024, GPT-2's 768 on
// 6 rows, a 4,096 row (4 packs a thread in bf16, 8 in fp32) and bf16's widest row, 8,192, with a weight off
// a 16-byte boundary; fp32, bf16 and fp16; upstream gradients of both outputs, of the norm alone (so the
// norm's part of x's gradient is checked by itself) and of the sum alone; and one case without weight and
// bias. The sum must be the bits of x + branch; the norm within a unit of its value in double (plus fp32's
// rounding of the row's sums); x's gradient, computed in fp32 and rounded once, within a unit of each
// value plus fp32's rounding of the row's terms (dropping a term of the formula fails it); the weight's
// and bias's within the rounding of the kernel's chains of fp32 additions (kernels/bias_gradient_plan.h);
// x's and branch's gradients one tensor's values, and two runs the same bits.
TEST(FusedKernels, ResidualNormEqualsTheNormOfTheSumForwardAndBackward) {
  REQUIRE_DEVICE(1);
  if (device_under_test() != "cuda")
    SKIP_NOT_APPLICABLE("the residual norm kernels are CUDA's; tests/models/residual_norm_test.cpp checks their arithmetic and wiring on the CPU");
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  constexpr double eps = 1e-5;
#if SEGTRAIN_WITH_CUDA
  const int64_t multiprocessors = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
#else
  const int64_t multiprocessors = 1;  // not reached: the test skips without a CUDA device
#endif
  double worst_norm = 0, worst_dx = 0, worst_dw = 0, worst_aten = 0;
  struct Case {
    int64_t rows, d, offset;
    bool parameters;
  };
  const std::vector<Case> cases = {{8192, 1024, 0, true}, {6, 768, 0, true}, {1024, 4096, 0, true},
                                   {6, 8192, 1, true},    {512, 1024, 0, false}};
  for (const bool centered : {true, false})
    for (const Case& c : cases)
      for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf})
        for (const int upstream : {0, 1, 2}) {  // both outputs, the norm alone, the sum alone
          if (c.d * static_cast<int64_t>(c10::elementSize(dtype)) > kernels::kFusedNormRowBytes) continue;
          at::manual_seed(41);
          const int64_t d = c.d;
          const auto x0 = (at::randn({2, c.rows / 2, d}, cuda) * 3 + 1).to(dtype);
          const auto branch0 = at::randn(x0.sizes(), cuda).to(dtype);
          const auto w_storage = (at::randn({d + c.offset}, cuda) * 0.3 + 1).to(dtype);
          const at::Tensor w0 = c.parameters ? w_storage.narrow(0, c.offset, d) : at::Tensor();
          const at::Tensor b0 = c.parameters && centered ? (at::randn({d}, cuda) * 0.1).to(dtype) : at::Tensor();
          const auto up_sum = at::randn(x0.sizes(), cuda).to(dtype), up_normed = at::randn(x0.sizes(), cuda).to(dtype);
          const bool uses_sum = upstream != 1, uses_normed = upstream != 2;
          const std::string what = std::string(centered ? "LayerNorm " : "RMSNorm ") + c10::toString(dtype) + " " +
                                   std::to_string(c.rows) + " x " + std::to_string(d) +
                                   (c.offset ? ", weight off a 16-byte boundary" : "") +
                                   (c.parameters ? "" : ", no weight or bias") +
                                   (upstream == 0 ? "" : upstream == 1 ? ", the norm's gradient alone" : ", the sum's alone");
          // The outputs, then the gradients of x, branch, weight and bias (undefined where not asked or not used).
          auto run = [&](bool fused) {
            auto x = x0.clone().requires_grad_(), branch = branch0.clone().requires_grad_();
            at::Tensor w = w0.defined() ? w0.detach().requires_grad_() : w0;
            at::Tensor b = b0.defined() ? b0.clone().requires_grad_() : b0;
            at::Tensor sum, normed;
            if (fused) {
              auto out = centered ? kernels::add_layer_norm_fused(x, branch, w, b, eps)
                                  : kernels::add_rms_norm_fused(x, branch, w, eps);
              sum = out.sum, normed = out.normed;
            } else {
              sum = x + branch;
              normed = at::layer_norm(sum, {d}, w, b, eps);
            }
            std::vector<at::Tensor> outputs, grads_in, inputs{x, branch};
            if (uses_sum) outputs.push_back(sum), grads_in.push_back(up_sum);
            if (uses_normed) outputs.push_back(normed), grads_in.push_back(up_normed);
            for (const at::Tensor& p : {w, b})
              if (p.defined()) inputs.push_back(p);
            const auto g = torch::autograd::grad(outputs, inputs, grads_in, false, false, /*allow_unused=*/true);
            std::vector<at::Tensor> all{sum.detach(), normed.detach(), g[0], g[1]};
            size_t next = 2;
            all.push_back(w.defined() ? g[next++] : at::Tensor());
            all.push_back(b.defined() ? g[next++] : at::Tensor());
            return all;
          };
          const auto got = run(true), again = run(true);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(got[i].defined(), again[i].defined()) << what << " output " << i;
            if (!got[i].defined()) continue;
            ASSERT_EQ(got[i].scalar_type(), dtype) << what << " output " << i;
            EXPECT_TRUE(at::equal(got[i], again[i])) << what << ": output " << i << " not the same bits twice";
          }
          const double unit = dtype == at::kFloat ? std::ldexp(1.0, -24)
                              : dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
          EXPECT_TRUE(at::equal(got[0], x0 + branch0)) << what << ": the sum is not x + branch's bits";
          EXPECT_TRUE(at::equal(got[2], got[3])) << what << ": x's and branch's gradients differ";
          // The reference in double from the rounded sum.
          auto s = got[0].to(at::kDouble).detach().requires_grad_();
          auto wd = w0.defined() ? w0.to(at::kDouble).requires_grad_() : at::ones({d}, cuda.dtype(at::kDouble));
          auto bd = b0.defined() ? b0.to(at::kDouble).requires_grad_() : at::zeros({d}, cuda.dtype(at::kDouble));
          const auto mean = centered ? s.mean(-1, true) : at::zeros_like(s.select(-1, 0)).unsqueeze(-1);
          const auto rstd = at::rsqrt((s - mean).square().mean(-1, true) + eps);
          const auto y = (s - mean) * rstd * wd + bd;
          at::Tensor loss = at::zeros({}, cuda.dtype(at::kDouble));
          if (uses_sum) loss = loss + (s * up_sum.to(at::kDouble)).sum();
          if (uses_normed) loss = loss + (y * up_normed.to(at::kDouble)).sum();
          std::vector<at::Tensor> wrt{s};
          if (w0.defined()) wrt.push_back(wd);
          if (b0.defined()) wrt.push_back(bd);
          const auto ref = torch::autograd::grad({loss}, wrt, {}, false, false, /*allow_unused=*/true);
          auto apart = [](const at::Tensor& a, const at::Tensor& e) { return (a.to(at::kDouble) - e).abs(); };
          const double row_terms = 64 * std::ldexp(1.0, -24);  // fp32's rounding of a row's sums, relative
          const auto norm_error = apart(got[1], y.detach());
          worst_norm = std::max(worst_norm, (norm_error / (y.detach().abs() + 1e-3)).max().item<double>());
          EXPECT_FALSE((norm_error > y.detach().abs() * 2 * unit + row_terms * 8).any().item<bool>())
              << what << " normed: largest difference " << norm_error.max().item<double>();
          // x's gradient: the norm's part is rstd (g - mean g - x^ mean(g x^)); its terms' size is rstd |g| + rstd |g|.
          const auto g_terms = (rstd * (up_normed.to(at::kDouble) * wd).abs()).detach();
          const auto dx_bound = ref[0].abs() * 2 * unit + g_terms.amax(-1, true) * (uses_normed ? 8 * row_terms : 0.0);
          const auto dx_error = apart(got[2], ref[0]);
          worst_dx = std::max(worst_dx, (dx_error / (ref[0].abs() + 1e-3)).max().item<double>());
          EXPECT_FALSE((dx_error > dx_bound).any().item<bool>())
              << what << " d x: largest difference " << dx_error.max().item<double>();
          // The weight's and bias's gradients against the sums in double, within the chains the plan adds in fp32.
          const auto plan = kernels::plan_column_sums(s.numel() / d, d, c10::elementSize(dtype), true, multiprocessors);
          const double chains = static_cast<double>(plan.rows_per_split) / kernels::kRowThreads + kernels::kRowThreads +
                                static_cast<double>(plan.splits);
          const auto xhat = ((s - mean) * rstd).detach().reshape({-1, d});
          const auto dy = up_normed.to(at::kDouble).reshape({-1, d});
          size_t next = 1;
          for (const int index : {4, 5}) {
            const bool defined = index == 4 ? w0.defined() : b0.defined();
            if (!defined) continue;
            const at::Tensor exact = ref[next++];
            ASSERT_EQ(got[index].defined(), uses_normed) << what << (index == 4 ? " d w" : " d b");
            if (!uses_normed) continue;
            const auto terms = index == 4 ? dy * xhat : dy;
            const auto bound = terms.abs().sum(0) * (chains * std::ldexp(1.0, -24) + 1e-5) + exact.abs() * 2 * unit;
            const auto error = apart(got[index], exact);
            worst_dw = std::max(worst_dw, (error / (exact.abs() + 1e-6)).max().item<double>());
            EXPECT_FALSE((error > bound).any().item<bool>())
                << what << (index == 4 ? " d w" : " d b") << ": largest difference " << error.max().item<double>()
                << " from the sum in double";
          }
          if (centered && upstream == 0) {  // and ATen's add and LayerNorm in the same dtype, for the record
            const auto want = run(false);
            worst_aten = std::max(worst_aten, (apart(got[2], want[2].to(at::kDouble)).max() /
                                               want[2].to(at::kDouble).abs().max()).item<double>());
          }
        }
  record("residual norm kernels vs the norm of the sum in double: normed within " + std::to_string(worst_norm) +
         ", d x within " + std::to_string(worst_dx) + ", d w and d b within " + std::to_string(worst_dw) +
         " (relative); LayerNorm's d x from ATen's add and LayerNorm's within " + std::to_string(worst_aten) +
         " of the largest");
}

}  // namespace
}  // namespace segtrain
