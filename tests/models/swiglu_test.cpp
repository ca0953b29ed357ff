// SwiGLU's arithmetic (kernels/swiglu.h): the kernels' per-element functions
// (kernels/swiglu_element.h, run here on the host) against silu(g) u and its gradient in double
// and against ATen's composite, forward and backward, fp32, bf16 and fp16; the CPU's dispatch
// (the composite, recorded as such) and what the fused call says on the CPU. On a GPU the gpu
// suite runs the kernels themselves (tests/gpu, FusedKernels).
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <cmath>

#include "common/error.h"
#include "kernels/forward_paths.h"
#include "kernels/fused_kernels.h"
#include "kernels/swiglu.h"
#include "kernels/swiglu_element.h"

namespace segtrain::kernels {
namespace {

struct Replayed {
  at::Tensor value, grad_gate, grad_up;
};

// The kernels' element functions over every element, each result rounded once to the dtype.
Replayed replay(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& grad) {
  const auto g = gate.to(at::kFloat).contiguous(), u = up.to(at::kFloat).contiguous(), d = grad.to(at::kFloat).contiguous();
  auto value = at::empty_like(g), dg = at::empty_like(g), du = at::empty_like(g);
  const float *gp = g.const_data_ptr<float>(), *up_ = u.const_data_ptr<float>(), *dp = d.const_data_ptr<float>();
  for (int64_t i = 0; i < g.numel(); ++i) {
    value.mutable_data_ptr<float>()[i] = swiglu_value(gp[i], up_[i]);
    const SwigluGradient r = swiglu_gradient(gp[i], up_[i], dp[i]);
    dg.mutable_data_ptr<float>()[i] = r.gate;
    du.mutable_data_ptr<float>()[i] = r.up;
  }
  const auto t = gate.scalar_type();
  return {value.to(t), dg.to(t), du.to(t)};
}

double unit_of(at::ScalarType t) {
  return t == at::kFloat ? std::ldexp(1.0, -23) : t == at::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
}

// Each |a - b| within `units` units in the last place of |b| or of the largest |b| (a gradient near
// zero, where 1 + g (1 - sigmoid(g)) cancels, is as exact as the largest one, not as its own value).
void expect_within(const at::Tensor& a, const at::Tensor& b, double units, const std::string& what) {
  const auto a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  const auto bound = b64.abs() * units + b64.abs().max() * units;
  const auto over = (a64 - b64).abs() > bound;
  EXPECT_FALSE(over.any().item<bool>()) << what << ": " << over.sum().item<int64_t>() << " of " << a.numel()
                                        << " values apart, largest difference "
                                        << (a64 - b64).abs().max().item<double>();
}

TEST(Swiglu, TheKernelsArithmeticIsTheDefinitionAndTheComposite) {
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    at::manual_seed(9);
    // Gates past where exp(-g) overflows fp32 (g < -88) and where sigmoid saturates.
    auto gate = (at::randn({7, 333}) * 4.0).to(dtype);
    gate[0][0] = -100.0;
    gate[0][1] = 100.0;
    gate[0][2] = 0.0;
    const auto up = at::randn({7, 333}).to(dtype);
    const auto grad = at::randn({7, 333}).to(dtype);
    const std::string what = c10::toString(dtype);
    const Replayed kernel = replay(gate, up, grad);
    // The definition in double, rounded once to the dtype.
    const auto g = gate.to(at::kDouble), u = up.to(at::kDouble), d = grad.to(at::kDouble);
    const auto s = at::sigmoid(g);
    // fp32: a few roundings in fp32 (exp, the divisions); 16 bits: the one rounding to the dtype.
    const double unit = unit_of(dtype), units = dtype == at::kFloat ? 8 : 2;
    expect_within(kernel.value, (g * s * u).to(dtype), units * unit, what + " value vs double");
    expect_within(kernel.grad_gate, (d * u * s * (1 + g * (1 - s))).to(dtype), units * unit, what + " d gate vs double");
    expect_within(kernel.grad_up, (d * g * s).to(dtype), units * unit, what + " d up vs double");
    EXPECT_EQ(kernel.value[0][0].item<float>(), -0.0f) << what;  // silu(-100) underflows, no NaN
    EXPECT_TRUE(at::isfinite(kernel.grad_gate).all().item<bool>()) << what;
    // ATen's composite rounds silu(g) and d * u before the product: within a unit of each (three).
    auto gate_leaf = gate.clone().requires_grad_(), up_leaf = up.clone().requires_grad_();
    const auto composite = swiglu_composite(gate_leaf, up_leaf);
    ASSERT_EQ(composite.scalar_type(), dtype);
    const auto grads = torch::autograd::grad({composite}, {gate_leaf, up_leaf}, {grad});
    expect_within(kernel.value, composite.detach(), 3 * units * unit, what + " value vs composite");
    expect_within(kernel.grad_gate, grads[0], 3 * units * unit, what + " d gate vs composite");
    expect_within(kernel.grad_up, grads[1], 3 * units * unit, what + " d up vs composite");
  }
}

TEST(Swiglu, TheCpuTakesTheCompositeAndAFusedCallSaysWhyNot) {
  at::manual_seed(10);
  const auto gate = at::randn({3, 40}), up = at::randn({3, 40});
  start_recording_paths();
  EXPECT_TRUE(at::equal(swiglu(gate, up), at::silu(gate) * up));
  EXPECT_EQ(stop_recording_paths(), static_cast<uint32_t>(ForwardPath::swiglu_composite));
  EXPECT_EQ(describe_paths(static_cast<uint32_t>(ForwardPath::swiglu_fused)), "SwiGLU fused kernel");
  try {
    swiglu_fused(gate, up);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string expected = fused_kernels_built() ? "they take CUDA tensors; got gate on cpu" : "has no CUDA";
    EXPECT_NE(std::string(e.what()).find("the fused SwiGLU kernels do not apply: " ), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace segtrain::kernels
