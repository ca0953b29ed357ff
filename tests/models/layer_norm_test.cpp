// LayerNorm's call (kernels/layer_norm.h): in 16 bits outside autocast, against what autocast's
// fp32 policy computes (x, weight and bias copied to fp32, normalised, the result rounded once by
// the next op's cast), forward and backward, bf16 and fp16, with ATen's CPU kernel; the CPU's
// dispatch (ATen's call as before, parameters narrower than x read in its dtype) and the paths it
// records; what the 16-bit call refuses. On a GPU the gpu suite runs the CUDA kernel the same
// way (tests/gpu, FusedKernels).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/layer_norm.h"

namespace segtrain::kernels {
namespace {

constexpr double kEps = 1e-5;

// The largest |a - b| over the largest |b|.
double relative_to_largest(const at::Tensor& a, const at::Tensor& b) {
  const auto b64 = b.to(at::kDouble);
  return (a.to(at::kDouble) - b64).abs().max().item<double>() / b64.abs().max().item<double>();
}

TEST(LayerNorm, SixteenBitsIsAutocastsFp32ResultRoundedOnce) {
  for (const auto dtype : {at::kBFloat16, at::kHalf}) {
    at::manual_seed(5);
    auto x = (at::randn({3, 5, 256}) * 3.0 + 1.0).to(dtype).requires_grad_();
    auto w = (at::rand({256}) + 0.5).to(dtype).requires_grad_();
    auto b = at::randn({256}).to(dtype).requires_grad_();
    const auto got = layer_norm_16bit(x, w, b, kEps);
    ASSERT_EQ(got.scalar_type(), dtype);
    // What autocast computes: every input in fp32 (exact copies), the result fp32.
    auto x32 = x.detach().to(at::kFloat).requires_grad_();
    auto w32 = w.detach().to(at::kFloat).requires_grad_();
    auto b32 = b.detach().to(at::kFloat).requires_grad_();
    const auto want = at::layer_norm(x32, {256}, w32, b32, kEps);
    // Each value within one unit in the last place of its own rounding (2^-8 bf16, 2^-11 fp16).
    const double unit = dtype == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const auto rounded = want.detach().to(dtype).to(at::kDouble);
    EXPECT_TRUE(at::le((got.to(at::kDouble) - rounded).abs(), rounded.abs() * unit * 2 + 1e-7).all().item<bool>())
        << dtype;
    // Backward: x's, weight's and bias's gradients as autocast's (an fp32 gradient rounded to the
    // parameter's dtype), within two units of the largest.
    const auto upstream = at::randn(got.sizes()).to(dtype);
    const auto grads = torch::autograd::grad({got}, {x, w, b}, {upstream});
    const auto reference = torch::autograd::grad({want}, {x32, w32, b32}, {upstream.to(at::kFloat)});
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(grads[i].scalar_type(), dtype) << i;
      EXPECT_LE(relative_to_largest(grads[i], reference[i]), 2 * unit) << dtype << (i == 0 ? " d x" : i == 1 ? " d weight" : " d bias");
    }
  }
}

TEST(LayerNorm, TheCpuKeepsAtensCallAndRecordsTheResultsDtype) {
  at::manual_seed(6);
  const auto x = at::randn({2, 7, 32}) * 2.0;
  const auto w = at::rand({32}) + 0.5, b = at::randn({32});
  start_recording_paths();
  EXPECT_TRUE(at::equal(layer_norm(x, w, b, kEps, NormReader::matmul), at::layer_norm(x, {32}, w, b, kEps)));
  EXPECT_EQ(stop_recording_paths(), static_cast<uint32_t>(ForwardPath::layer_norm_fp32));
  // bf16 parameters in an fp32 stream are read as fp32 (ATen's CPU kernel takes only the reverse).
  const auto w16 = w.to(at::kBFloat16), b16 = b.to(at::kBFloat16);
  EXPECT_TRUE(at::equal(layer_norm(x, w16, b16, kEps, NormReader::matmul), at::layer_norm(x, {32}, w16.to(at::kFloat), b16.to(at::kFloat), kEps)));
  // A bf16 stream with bf16 parameters: ATen's call as it is (the CPU's autocast leaves LayerNorm in bf16).
  start_recording_paths();
  const auto y16 = layer_norm(x.to(at::kBFloat16), w16, b16, kEps, NormReader::other);
  EXPECT_EQ(stop_recording_paths(), static_cast<uint32_t>(ForwardPath::layer_norm_16bit));
  EXPECT_TRUE(at::equal(y16, at::layer_norm(x.to(at::kBFloat16), {32}, w16, b16, kEps)));
  EXPECT_EQ(describe_paths(static_cast<uint32_t>(ForwardPath::layer_norm_16bit) |
                           static_cast<uint32_t>(ForwardPath::layer_norm_fp32)),
            "LayerNorm 16-bit and fp32");
}

TEST(LayerNorm, SixteenBitsRefusesAnFp32StreamAndMixedParameters) {
  const auto x = at::randn({2, 8});
  auto refusal = [](const at::Tensor& x, const at::Tensor& w) {
    try {
      layer_norm_16bit(x, w, at::Tensor(), kEps);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no InputError");
  };
  EXPECT_NE(refusal(x, at::ones({8})).find("takes a bf16 or fp16 x; got Float"), std::string::npos);
  EXPECT_NE(refusal(x.to(at::kBFloat16), at::ones({8})).find("in x's dtype (BFloat16); got Float and none"),
            std::string::npos)
      << refusal(x.to(at::kBFloat16), at::ones({8}));
}

}  // namespace
}  // namespace segtrain::kernels
