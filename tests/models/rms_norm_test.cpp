// RMSNorm's arithmetic (kernels/rms_norm.h): the composite against the definition in
// fp64, and ATen's fused op, called as the CUDA path calls it, against the composite on
// the CPU (where ATen computes it as a composite of its own): values, dtypes, gradients of x
// and weight. On a GPU the gpu suite runs the fused kernel
// itself (tests/gpu, FusedKernels).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "common/error.h"
#include "kernels/rms_norm.h"

namespace segtrain::kernels {
namespace {

constexpr double kEps = 1e-6;

// weight_i x_i / sqrt(mean_j x_j^2 + eps), in fp64.
at::Tensor defined_rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  const auto xd = x.to(at::kDouble);
  return weight.to(at::kDouble) * xd / (xd.pow(2).mean(-1, true) + kEps).sqrt();
}

TEST(RmsNorm, TheCompositeIsTheDefinitionAndTheCpuTakesIt) {
  at::manual_seed(3);
  const auto x = at::randn({2, 5, 16}) * 3.0;
  const auto w = at::randn({16});
  EXPECT_TRUE(at::allclose(rms_norm_composite(x, w, kEps).to(at::kDouble), defined_rms_norm(x, w), 1e-6, 1e-6));
  EXPECT_TRUE(at::equal(rms_norm(x, w, kEps), rms_norm_composite(x, w, kEps)));  // the CPU keeps the composite
}

TEST(RmsNorm, AtensFusedOpAgreesWithTheCompositeInValueDtypeAndGradient) {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    at::manual_seed(5);
    auto x = (at::randn({3, 4, 32}) * 2.0).to(dtype).requires_grad_();
    auto w = (at::rand({32}) + 0.5).to(dtype).requires_grad_();
    const auto fused = rms_norm_fused(x, w, kEps);
    const auto composite = rms_norm_composite(x, w, kEps);
    ASSERT_EQ(fused.scalar_type(), composite.scalar_type()) << dtype;
    // bf16: the fused op rounds once, the composite twice: one unit in the last place (2^-7 relative).
    const double tol = dtype == at::kFloat ? 1e-6 : 1.0 / 64;
    EXPECT_TRUE(at::allclose(fused.to(at::kFloat), composite.to(at::kFloat), tol, 1e-5)) << dtype;
    const auto upstream = at::randn(fused.sizes()).to(dtype);
    const auto got = torch::autograd::grad({fused}, {x, w}, {upstream});
    const auto want = torch::autograd::grad({composite}, {x, w}, {upstream});
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(got[i].scalar_type(), dtype);
      // The weight's gradient sums 12 rows: bf16 rounds each differently.
      EXPECT_TRUE(at::allclose(got[i].to(at::kFloat), want[i].to(at::kFloat), dtype == at::kFloat ? 1e-5 : 5e-2, 1e-2))
          << dtype << (i == 0 ? " d x" : " d weight");
    }
  }
}

// ATen would warn and take its composite for mixed dtypes; the fused call says so instead
// (the dispatch in rms_norm() never makes it).
TEST(RmsNorm, TheFusedOpRefusesMixedDtypes) {
  const auto x = at::randn({2, 8}).to(at::kBFloat16);
  try {
    rms_norm_fused(x, at::ones({8}), kEps);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("got BFloat16 and Float"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace segtrain::kernels
