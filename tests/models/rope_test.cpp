// RoPE's arithmetic: ATen's composite (kernels/rope.h) against the rotation RoFormer
// defines (each pair (x_i, x_{i+h}) turned by its angle), and the CUDA kernel's per-element
// arithmetic (kernels/rope_element.h, run here on the host over the kernel's own indexing)
// against the composite, forward and gradient. On a GPU the gpu suite runs the kernel
// itself (tests/gpu, FusedKernels).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "common/error.h"
#include "kernels/fused_kernels.h"
#include "kernels/rope.h"
#include "kernels/rope_element.h"

namespace segtrain::kernels {
namespace {

struct Angles {
  at::Tensor cos, sin;
};

// transformers' layout: angles of the rotated dims' first half repeated for the second.
Angles angles_for(const at::Tensor& positions, int64_t rotated_dims, double base = 10000.0) {
  auto inv_freq = 1.0 / at::pow(base, at::arange(0, rotated_dims, 2, at::kDouble) / rotated_dims);
  auto freqs = positions.to(at::kDouble).unsqueeze(-1) * inv_freq.view({1, 1, -1});
  auto angles = at::cat({freqs, freqs}, -1).unsqueeze(1).to(at::kFloat);  // [B, 1, T, rd]
  return {angles.cos(), angles.sin()};
}

// RoFormer's rotation written out: pair i < h turns (x_i, x_{i+h}) by angle theta_i.
at::Tensor rotated_pairs(const at::Tensor& x, const Angles& a) {
  const int64_t rd = a.cos.size(-1), half = rd / 2;
  auto out = x.to(at::kDouble).clone();
  auto xd = x.to(at::kDouble);
  auto c = a.cos.to(at::kDouble), s = a.sin.to(at::kDouble);
  for (int64_t i = 0; i < half; ++i) {
    auto xi = xd.select(-1, i), xj = xd.select(-1, i + half);
    auto ci = c.select(-1, i), si = s.select(-1, i);
    out.select(-1, i).copy_(xi * ci - xj * si);
    out.select(-1, i + half).copy_(xi * si + xj * ci);
  }
  return out;
}

// The kernel's loop on the host: every output element from rope_element, as rope_cuda.cu
// indexes it (the angles shared by the batch when they have one row).
at::Tensor host_kernel(const at::Tensor& in, const Angles& a, bool transposed, at::ScalarType out_dtype) {
  const auto x = in.to(at::kFloat).contiguous();
  const auto c = a.cos.contiguous(), s = a.sin.contiguous();
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), rd = c.size(-1);
  auto out = at::empty({B, H, T, D}, at::kFloat);
  const float* px = x.const_data_ptr<float>();
  float* po = out.mutable_data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float* row = px + ((b * H + h) * T + t) * D;
        const int64_t angle = (c.size(0) == 1 ? 0 : b * T * rd) + t * rd;
        for (int64_t d = 0; d < D; ++d)
          po[((b * H + h) * T + t) * D + d] =
              d >= rd ? row[d]
                      : rope_element(row[d], row[rope_partner(d, rd)], c.const_data_ptr<float>() + angle,
                                     s.const_data_ptr<float>() + angle, d, rd, transposed);
      }
  return out.to(out_dtype);
}

struct Case {
  int64_t batch, heads, tokens, head_dim, rotated_dims;
  bool shared_angles;
};

class Rope : public ::testing::TestWithParam<Case> {};

TEST_P(Rope, CompositeIsRoFormersRotation) {
  const Case k = GetParam();
  at::manual_seed(3);
  auto x = at::randn({k.batch, k.heads, k.tokens, k.head_dim});
  auto positions = at::randint(0, 40000, {k.shared_angles ? 1 : k.batch, k.tokens}, at::kLong);
  const auto a = angles_for(positions, k.rotated_dims);
  EXPECT_TRUE(at::allclose(rope_composite(x, a.cos, a.sin).to(at::kDouble), rotated_pairs(x, a), 1e-5, 1e-5));
}

TEST_P(Rope, KernelArithmeticEqualsTheCompositeForwardAndGradient) {
  const Case k = GetParam();
  at::manual_seed(4);
  auto positions = at::randint(0, 40000, {k.shared_angles ? 1 : k.batch, k.tokens}, at::kLong);
  const auto a = angles_for(positions, k.rotated_dims);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    // A view as the blocks hand it over: heads transposed out of [B, T, H, D].
    auto x = at::randn({k.batch, k.tokens, k.heads, k.head_dim}).to(dtype).transpose(1, 2).requires_grad_();
    auto reference = rope_composite(x, a.cos, a.sin);  // fp32: bf16 x promotes with the fp32 angles
    ASSERT_EQ(reference.scalar_type(), at::kFloat);
    auto kernel = host_kernel(x.detach(), a, /*transposed=*/false, at::kFloat);
    // fp32 arithmetic in both; the host's order of the two products may differ by an ulp.
    EXPECT_TRUE(at::allclose(kernel, reference.detach(), 1e-6, 1e-6)) << dtype;
    // Under autocast the kernel writes x's dtype: the same fp32 value rounded once.
    EXPECT_TRUE(at::allclose(host_kernel(x.detach(), a, false, dtype).to(at::kFloat),
                             reference.detach().to(dtype).to(at::kFloat), dtype == at::kFloat ? 1e-6 : 1.0 / 256, 1e-6))
        << dtype;

    // The gradient: the fp32 composite's, rounded once to x's dtype. (The bf16 composite's own
    // gradient rounds each of its terms to bf16 before summing them, so where they nearly cancel it
    // is further from the exact value than one rounding.)
    auto upstream = at::randn(reference.sizes());
    auto x32 = x.detach().to(at::kFloat).requires_grad_();
    auto grad32 = torch::autograd::grad({rope_composite(x32, a.cos, a.sin)}, {x32}, {upstream})[0];
    if (dtype == at::kFloat) {
      auto grad = torch::autograd::grad({reference}, {x}, {upstream})[0];
      EXPECT_TRUE(at::allclose(grad, grad32, 1e-6, 1e-6));
    }
    auto kernel_grad = host_kernel(upstream, a, /*transposed=*/true, dtype);
    EXPECT_TRUE(at::allclose(kernel_grad.to(at::kFloat), grad32.to(dtype).to(at::kFloat),
                             dtype == at::kFloat ? 1e-5 : 1.0 / 256, 1e-6))
        << dtype;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Rope,
                         ::testing::Values(Case{2, 3, 5, 8, 8, false},    // Llama: the whole head rotates
                                           Case{2, 2, 4, 16, 4, false},   // GPT-NeoX rotary_pct 0.25
                                           Case{3, 1, 7, 12, 6, true}));  // angles shared by the batch

TEST(FusedKernelsSwitch, IsOnUnlessZeroAllTakesTheUntestedAndOtherValuesNameTheVariable) {
  EXPECT_EQ(fused_kernels_switch(nullptr), FusedKernels::on);  // on by default (a CUDA device alone takes it)
  EXPECT_EQ(fused_kernels_switch(""), FusedKernels::on);
  EXPECT_EQ(fused_kernels_switch("0"), FusedKernels::off);
  EXPECT_EQ(fused_kernels_switch("1"), FusedKernels::on);
  EXPECT_EQ(fused_kernels_switch("all"), FusedKernels::all);
  try {
    fused_kernels_switch("yes");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("SEGTRAIN_FUSED_KERNELS=yes: expected 0"), std::string::npos) << e.what();
  }
}

TEST(FusedKernelsSwitch, TheCpuKeepsTheCompositeAndAFusedCallWithoutCudaSaysWhy) {
  auto x = at::randn({1, 2, 3, 4});
  const auto a = angles_for(at::arange(3).view({1, 3}), 4);
  EXPECT_TRUE(at::equal(rope(x, a.cos, a.sin), rope_composite(x, a.cos, a.sin)));
  // Without CUDA the build says so; with it, a CPU tensor is named (tests/gpu runs the kernel).
  try {
    rope_fused(x, a.cos, a.sin);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string expected = fused_kernels_built() ? "got x on cpu" : "needs a CUDA build";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace segtrain::kernels
